"""``wonder model setup``: convert (once) and cache the local model, print its directory."""

from __future__ import annotations

import argparse

from cluster.cli.output import json_mode, print_json
from core.settings import load_settings
from serving.model_setup import ensure_local_model


def cmd_model_setup(args: argparse.Namespace) -> int:
    directory = ensure_local_model(progress=True, settings=load_settings())
    if json_mode():
        print_json({"model_dir": str(directory)})
    else:
        print(directory)
    return 0
