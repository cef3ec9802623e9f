# One image for every kubegpu component: `kubegpu operator`, `kubegpu validator`,
# `kubegpu device-plugin`, `kubegpu feature-discovery`, `kubegpu mig-manager`,
# `kubegpu exporter`, `kubegpu mps-control-daemon`. The operator's DaemonSets run this image
# with the component as the command.
#
# For users with Docker. The release image is built without Docker by `make image`
# (scripts/build-image); both install the same packages: requirements/runtime.lock, hash
# checked, then kubegpu with --no-deps and no extras (no planner: the operands never plan).
# tests/unit/test_image_packages.py keeps the two in step.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY requirements/runtime.lock ./requirements/runtime.lock
RUN pip install --require-hashes --no-deps --only-binary=:all: -r requirements/runtime.lock
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip install --no-deps --no-compile . && rm -rf /src

WORKDIR /
USER 0
ENTRYPOINT ["kubegpu"]
CMD ["--help"]
