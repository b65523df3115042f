"""`ray start`, kept on the loopback interface (docs/scale-out.md: testing on one machine).

Ray turns a loopback `--node-ip-address` or `--address` into the machine's routable address
(`resolve_ip_for_localhost`), so a worker node started with `ray start --address 127.0.0.1:PORT`
dials (and advertises) another interface. This wrapper runs Ray's own CLI with that one
resolution left as given; everything else is stock `ray start`.
"""

from __future__ import annotations

import sys

import ray._private.services as services
from ray.scripts.scripts import main


def _as_given(host: str) -> str:
    return host


services.resolve_ip_for_localhost = _as_given

if __name__ == "__main__":
    sys.exit(main())
