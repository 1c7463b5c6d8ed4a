#!/usr/bin/env bash
# The two database servers the store tests run against, installed from Debian's packages when
# missing, configured and started without systemd (this machine kind starts neither):
#   PostgreSQL on 127.0.0.1:5432, trust auth for local TCP, database `test`;
#   MariaDB on 127.0.0.1:3306, root with an empty password over TCP, database `test`.
# Safe to run again: each step checks before it changes anything.
set -euo pipefail

missing=()
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || missing+=(postgresql)
command -v mariadbd >/dev/null || missing+=(mariadb-server)
if ((${#missing[@]})); then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# PostgreSQL: the newest installed major version's `main` cluster.
version="$(ls /usr/lib/postgresql | sort -V | tail -1)"
conf="/etc/postgresql/$version/main"
[[ -d "$conf" ]] || pg_createcluster --port 5432 "$version" main >/dev/null
if ! grep -q '# firepool-ci' "$conf/pg_hba.conf"; then
  # The first matching line wins, so trust for loopback TCP goes above the packaged rules.
  sed -i '1i host all all 127.0.0.1/32 trust # firepool-ci\nhost all all ::1/128 trust # firepool-ci' \
    "$conf/pg_hba.conf"
fi
sed -i -E "s/^#?listen_addresses *=.*/listen_addresses = '127.0.0.1'/; s/^#?port *=.*/port = 5432/" \
  "$conf/postgresql.conf"
if pg_isready -h 127.0.0.1 -p 5432 -q; then
  pg_ctlcluster "$version" main reload
else
  pg_ctlcluster --skip-systemctl-redirect "$version" main start
fi

# MariaDB: the packaged data directory, the server run as the mysql user in the background.
if [[ ! -d /var/lib/mysql/mysql ]]; then
  mariadb-install-db --user=mysql --datadir=/var/lib/mysql >/dev/null
fi
install -d -o mysql -g mysql /run/mysqld
if ! mariadb-admin -h 127.0.0.1 -P 3306 -u root ping >/dev/null 2>&1 \
  && ! mariadb-admin -u root ping >/dev/null 2>&1; then
  start-stop-daemon --start --background --oknodo --exec /usr/sbin/mariadbd -- \
    --user=mysql --bind-address=127.0.0.1 --port=3306
fi

for _ in $(seq 1 60); do
  pg_isready -h 127.0.0.1 -p 5432 -q && mariadb-admin -u root ping >/dev/null 2>&1 && break
  sleep 1
done

psql -h 127.0.0.1 -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'test'" | grep -q 1 \
  || psql -h 127.0.0.1 -U postgres -qc "CREATE DATABASE test"
# root@localhost keeps its socket login and gains the empty password over TCP; 127.0.0.1 is
# its own account in case the server skips name resolution.
mariadb -u root <<'SQL'
ALTER USER root@localhost IDENTIFIED VIA unix_socket OR mysql_native_password USING PASSWORD('');
CREATE USER IF NOT EXISTS root@'127.0.0.1' IDENTIFIED BY '';
GRANT ALL PRIVILEGES ON *.* TO root@'127.0.0.1' WITH GRANT OPTION;
CREATE DATABASE IF NOT EXISTS test CHARACTER SET utf8mb4;
SQL

pg_isready -h 127.0.0.1 -p 5432 -q || { echo "PostgreSQL did not start" >&2; exit 1; }
mariadb-admin -h 127.0.0.1 -P 3306 -u root ping >/dev/null || { echo "MariaDB did not start" >&2; exit 1; }
