# The firepool broker: `firepool serve --backend kubernetes`.
# Build from the repository root:  docker build -f deploy/docker/broker.Dockerfile -t firepool/broker:0.1.0 .
# Python is pinned to one patch release of the slim Debian image; pin it by digest in your registry.
FROM python:3.11.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN python -m venv /opt/firepool \
 && /opt/firepool/bin/pip install --no-cache-dir --upgrade pip \
 && /opt/firepool/bin/pip install --no-cache-dir ".[kubernetes]"

FROM python:3.11.11-slim-bookworm
COPY --from=build /opt/firepool /opt/firepool
RUN useradd --uid 10001 --create-home --home-dir /var/lib/firepool --shell /usr/sbin/nologin firepool
USER 10001:10001
ENV PATH=/opt/firepool/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /var/lib/firepool
EXPOSE 8321
ENTRYPOINT ["firepool", "serve", "--backend", "kubernetes", "--host", "0.0.0.0", "--data-dir", "/var/lib/firepool"]
