"""The executor pool: leases and clones, exclusions, `flowd roster check`."""
