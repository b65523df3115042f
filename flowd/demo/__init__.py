"""The bundled demo: a sample repository, a 5-story epic with a diamond, a scripted roster."""

from flowd.demo.sample import SAMPLE_EPIC_ID, build_sample_repo

__all__ = ["SAMPLE_EPIC_ID", "build_sample_repo"]
