module firepool.dev/tools/k8s/node

go 1.24
