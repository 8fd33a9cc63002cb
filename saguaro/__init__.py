"""saguaro: plan, simulate, tune and run speculative speculative decoding (SSD / Saguaro).

The application layer: the `saguaro` command line (`saguaro.cli`) and the autotune pipeline
(`saguaro.autotune(...)`, defined in `saguaro.pipeline`; imported lazily so planning never loads torch).
"""

__version__ = "0.1.0"
__all__ = ["AutotuneReport", "autotune"]


def __getattr__(name: str) -> object:
    if name in __all__:
        from saguaro import pipeline

        return getattr(pipeline, name)
    raise AttributeError(f"module 'saguaro' has no attribute {name!r}")
