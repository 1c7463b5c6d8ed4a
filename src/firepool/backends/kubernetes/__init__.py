"""The Kubernetes pod backend: each firepool pod is a Kubernetes pod running the agent.

Built on the official `kubernetes` client rather than `kubernetes_asyncio`: the official one
is maintained with the API (kubeconfig, in-cluster and exec-plugin auth, token refresh) and is
already the project's dependency; its calls block, so the backend runs them on a bounded
thread pool and keeps a single watch on a thread of its own, which keeps the broker's event
loop free without a second, community-maintained client.

Modules, one job each: `settings` (knobs and per-pool templates), `codec` (broker annotations
on pod metadata), `spec` (pod and Secret manifests), `status` (what a pod's status means),
`cache` (pods as the watch last saw them), `watch` (list+watch loop), `ratelimit` (pacing,
backoff), `errors` (typed errors), `rest` (JSON calls through the client), `records` (pod ->
PodRecord, i.e. restart recovery), `backend` (the PodBackend itself).
"""

from firepool.backends.kubernetes.backend import KubernetesBackend
from firepool.backends.kubernetes.settings import KubernetesSettings, PodTemplate, Templates

__all__ = ["KubernetesBackend", "KubernetesSettings", "PodTemplate", "Templates"]
