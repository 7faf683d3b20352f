"""Run ``lake`` as real processes (the CLI's public surface), several at once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def lake_all(*argvs: list[str]) -> list[subprocess.CompletedProcess[str]]:
    """Several independent ``lake`` runs at once (each is mostly interpreter start-up), results in
    the order given; ``args`` of each result is its argv."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "airflow_lake_provider.lake.cli", *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for argv in argvs
    ]
    done = []
    for argv, proc in zip(argvs, procs, strict=True):
        out, err = proc.communicate(timeout=600)
        done.append(subprocess.CompletedProcess(argv, proc.returncode, out, err))
    return done
