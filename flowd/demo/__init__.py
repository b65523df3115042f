"""The bundled demo: a sample repository, a 5-story epic with a diamond, a scripted roster."""

from flowd.demo.sample import SAMPLE_EPIC_ID, build_sample_repo


def demo_command(args: object) -> int:
    from flowd.demo.command import demo_command as run

    return run(args)  # type: ignore[arg-type]


__all__ = ["SAMPLE_EPIC_ID", "build_sample_repo", "demo_command"]
