"""What authz's HTTP ext_authz transport and our Envoy config agree on (both sides read these).

`CHECK_PREFIX`: Envoy's `http_service.path_prefix`; every check's path starts with it, so no
check can reach the transport's own `HEALTH_PATH`, which Envoy's health check of the authz
cluster asks (what gRPC health says on the gRPC port). `CARRIERS`: Envoy reads any 5xx from an HTTP
authorization service as that service failing, so a denial whose status is 5xx travels under a
4xx carrier, and envoy/envoy.yaml's local-reply mappers restore the real status.
"""

from __future__ import annotations

from collections.abc import Mapping

CHECK_PREFIX = "/ext_authz"
HEALTH_PATH = "/healthz"
CARRIERS: Mapping[int, int] = {503: 463, 508: 468}
