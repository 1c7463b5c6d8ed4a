# A pool's base image: the pod agent (`python -m firepool.agent`) and nothing of the broker.
# The agent's own dependencies are listed in agent-requirements.txt (a test keeps that list
# equal to what the agent imports), so the broker's (FastAPI, SQLAlchemy, numpy...) stay out.
# Extend this image with what a pool's jobs need (FROM firepool/base:0.1.0, then
# RUN pip install torch ...), keeping USER 10001.
# Build from the repository root:  docker build -f deploy/docker/pool-base.Dockerfile -t firepool/base:0.1.0 .
FROM python:3.11.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY deploy/docker/agent-requirements.txt ./
COPY src ./src
RUN python -m venv /opt/firepool \
 && /opt/firepool/bin/pip install --no-cache-dir --upgrade pip \
 && /opt/firepool/bin/pip install --no-cache-dir -r agent-requirements.txt \
 && /opt/firepool/bin/pip install --no-cache-dir --no-deps .

FROM python:3.11.11-slim-bookworm
COPY --from=build /opt/firepool /opt/firepool
# The pod spec runs this uid (runAsNonRoot); its jobs run under it too.
RUN useradd --uid 10001 --create-home --home-dir /home/firepool --shell /usr/sbin/nologin firepool \
 && mkdir -p /var/lib/firepool/pod && chown 10001:10001 /var/lib/firepool/pod
USER 10001:10001
ENV PATH=/opt/firepool/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /var/lib/firepool/pod
EXPOSE 7070 29500
CMD ["python", "-m", "firepool.agent", "--config-env", "FIREPOOL_AGENT_CONFIG"]
