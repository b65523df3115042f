"""Lane confinement (docs/sandbox.md): Landlock rules for every process of a lane."""
