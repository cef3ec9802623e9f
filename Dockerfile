# One image for every kubegpu component: `kubegpu operator`, `kubegpu validator`,
# `kubegpu device-plugin`, `kubegpu feature-discovery`, `kubegpu mig-manager`,
# `kubegpu exporter`, `kubegpu mps-control-daemon`. The operator's DaemonSets run this image
# with the component as the command.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip install . && rm -rf /src

WORKDIR /
USER 0
ENTRYPOINT ["kubegpu"]
CMD ["--help"]
