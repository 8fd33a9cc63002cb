"""Built-in prompts: short Python-source openings (the tiny pair was trained on the standard library)."""

BUILTIN_PROMPTS: tuple[str, ...] = (
    "def __init__(self, name, value=None):\n        self.",
    "import os\nimport sys\n\n\ndef main(argv):\n    ",
    "class Error(Exception):\n    \"\"\"Base class for",
    "    for i in range(len(items)):\n        if ",
    "    def __repr__(self):\n        return ",
    "        except (OSError, ValueError):\n            ",
    "    if not isinstance(path, str):\n        raise TypeError(",
    "# Copyright (C) 2001 Python Software Foundation\n\"\"\"",
)
