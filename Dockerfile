# The gpupolicy admission webhook image: `gpupolicy webhook serve` (gunicorn over TLS) as a non-root user.
#
#   docker build -t ghcr.io/gpupolicy/gpupolicy-webhook:0.1.0 .
#   docker run --rm -p 8443:8443 -v "$PWD/tls:/etc/gpupolicy/tls:ro" -v "$PWD/policy:/etc/gpupolicy/policy:ro" \
#     ghcr.io/gpupolicy/gpupolicy-webhook:0.1.0 webhook serve \
#     --policy /etc/gpupolicy/policy/admission-policy.json --cert-dir /etc/gpupolicy/tls
#
# The compiled Deployment passes `webhook serve --policy ... --cert-dir ...` as args, so the entrypoint is
# the `gpupolicy` CLI and `webhook serve` is only the default command. It runs with a read-only root:
# /tmp (gunicorn's worker heartbeats) and PROMETHEUS_MULTIPROC_DIR are emptyDir mounts there.
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1

# Only what the package build needs, so editing tests or docs does not invalidate the install layer.
WORKDIR /src
COPY pyproject.toml README.md ./
COPY policy/ policy/
COPY compiler/ compiler/
COPY cluster/ cluster/
COPY cli/ cli/
COPY webhook/ webhook/
RUN pip install . && rm -rf /src

WORKDIR /
# 65532 is the distroless "nonroot" uid the compiled Deployment's securityContext runs as.
USER 65532:65532
EXPOSE 8443
ENTRYPOINT ["gpupolicy"]
CMD ["webhook", "serve"]
