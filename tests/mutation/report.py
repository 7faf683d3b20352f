"""Run mutmut over the safety-critical modules and print killed/survived/score per module.

    python tests/mutation/report.py run [--all] [--together] [MODULE ...]  # mutmut run per module
                                                        # (--together: one run for all), then the table
    python tests/mutation/report.py report [MODULE ...] # the table from mutants/*.meta only
    python tests/mutation/report.py survivors [MODULE ...]  # surviving mutants not listed as equivalent
    python tests/mutation/report.py save [MODULE ...]   # keep mutants/*.meta in tests/mutation/results/
    python tests/mutation/report.py focus MODULE        # map MODULE's functions to its FOCUS tests only
    python tests/mutation/report.py kill NAME TEST ...  # TESTs fail with mutant NAME on: record it killed
    python tests/mutation/report.py stamp [MODULE ...]  # fingerprint the listed equivalents (checked)

MODULE is a key of MODULES (e.g. clean-planner); none means all. Each module runs as its own
`mutmut run` with a name filter, so mutmut only runs the tests that call that module's functions (its
stats map tests to functions) and never the whole selection. One worker (--max-children 1): the
machine is shared; MUTATION_WORKERS=2 in the environment runs two. Mutants listed in equivalent.txt
(name, its fingerprint, then why) count as neither killed nor survived in the score, as long as
the fingerprint matches the mutant mutmut generated last (a stale entry is retested and reported).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "airflow_lake_provider/lake"
MODULES = {
    "clean-planner": "services/clean/planner.py",
    "clean-plan": "services/clean/plan.py",
    "clean-executor": "services/clean/executor.py",
    "savepoint": "services/savepoint.py",
    "rollback-planner": "table/rollback/planner.py",
    "rollback-executor": "table/rollback/executor.py",
    # gather (what a rolled-back instant wrote) left executor.py on 2026-11-28
    "rollback-written": "table/rollback/written.py",
    # compactions undone for good and Hudi's retry of one left executor.py on 2026-11-28 (session 17)
    "rollback-undone": "table/rollback/undone.py",
    "compaction-planner": "services/compaction/planner.py",
    "compaction-executor": "services/compaction/executor.py",
    "compaction-scheduler": "services/compaction/scheduler.py",
    "compaction-operation": "services/compaction/operation.py",
    # table/writer.py until 2026-11-26, then split in five
    "writer": "table/write/writer.py",
    "write-checks": "table/write/checks.py",
    "write-planner": "table/write/planner.py",
    "write-group-writer": "table/write/group_writer.py",
    "bloom-index": "table/index/bloom.py",
    "timeline-store": "timeline/store.py",
    "timeline-markers": "timeline/markers.py",
    "timeline-heartbeat": "timeline/heartbeat.py",
    "fs-view": "file_group/view.py",
    "fs-builder": "file_group/builder.py",
    "fs-model": "file_group/model.py",
    "merge": "table/merge.py",
}
# mutmut's exit codes (mutmut.stats.status_by_exit_code) folded into what the table shows.
KILLED = {1, 3, 37}  # a failing test (or the type checker)
TIMEOUT = {24, -24, 152, 255, 36}
# Modules whose functions nearly every test calls: a surviving mutant would run ~430 tests (about
# 35 s) each. `focus` maps their functions to these test files only (below tests/unit/lake/; a kill
# there is a kill; a survivor is then tried against the rest, or killed by a new test, or listed as
# equivalent).
_WRITER_TESTS = (
    # Every test of the split modules' own folders (checks', planner's and bloom lookup's included).
    "table/write/",
    "table/index/",
    "services/partition_commit/test_partition_values.py",
    "services/partition_commit/test_merge.py",
    "table/archival/test_executor.py",
    "table/rollback/test_executor_adversarial.py",
    "table/test_reader.py",
    "services/clean/test_clean.py",
    "services/compaction/test_compaction.py",
    # the log rows a write keeps for a maintained MDT's column stats (and only then)
    "table/metadata/test_commit_reads.py",
    # the columns a maintained write indexes, chosen from the table's schema and config
    "table/metadata/test_stats_selection.py",
    # a record index dropped with the MDT by the write's own option
    "table/test_table_1x.py",
)
_ROLLBACK_TESTS = (
    "table/rollback/",
    "services/test_restore_1x.py",
    "services/test_restore_clustering.py",
    "services/test_restore_metadata_table.py",
    "services/clean/test_clean.py",
    "services/compaction/test_compaction.py",
    "table/write/test_writer_commit.py",
    # a maintained MDT: the deltacommit of a write undone goes with it
    "table/metadata/test_commit_crash.py",
    "table/metadata/test_rollback.py",
    # a v6 compaction's rollback deletes the logs on its slices (restore past it, the MDT's tombstones)
    "table/metadata/test_v6.py",
    # compactions a rollback undid are never run; Hudi's retry of one (interrupted too) runs again
    "services/compaction/test_executor_recovery.py",
)
FOCUS = {
    **dict.fromkeys(
        ("writer", "write-checks", "write-planner", "write-group-writer", "bloom-index"), _WRITER_TESTS
    ),
    # The store is called by nearly every test; its own tests and the services' that drive it.
    "timeline-store": (
        "timeline/test_store.py",
        "timeline/test_store_services.py",
        "timeline/test_store_v2.py",
        "table/archival/test_executor.py",
        "services/test_savepoint.py",
        "services/test_savepoint_safety.py",
        "table/rollback/test_executor.py",
        "table/rollback/test_written.py",
        "services/clean/test_clean.py",
        "services/compaction/test_compaction.py",
        "table/write/test_writer_commit.py",
        # the metadata-table functions (drop, properties): not reached by the files above
        "table/metadata/test_policy.py",
        "table/metadata/test_v6.py",
    ),
    # The rollback planner runs before every write (failed writes first): its own tests and the
    # rollback executor's.
    "rollback-planner": ("table/rollback/",),
    # The executor's `eligible_failed_writes` runs before every write too (~1,080 tests): its own
    # tests, restore's (which rolls back through it) and the services' that roll back failed writes.
    **dict.fromkeys(("rollback-executor", "rollback-written", "rollback-undone"), _ROLLBACK_TESTS),
    # The merge runs under every read and compaction (~390 tests, 131 s a survivor): its own tests,
    # the readers' and the compaction operation's that merge logs with base files.
    "merge": (
        "table/test_merge.py",
        "table/test_merge_mode_v6.py",
        "table/test_reader.py",
        "table/test_reader_1x.py",
        "table/test_reader_history.py",
        "services/compaction/test_operation.py",
        "services/compaction/test_compaction.py",
    ),
    # The compaction modules (~200-280 tests mapped each): the compaction tests, and the MDT's own
    # compaction and services that the data compaction runs after its commit.
    **dict.fromkeys(
        ("compaction-executor", "compaction-scheduler", "compaction-operation"),
        (
            "services/compaction/",
            "table/metadata/test_services.py",
            "table/metadata/test_compaction.py",
            # the metadata-table policy before an execute (drop, refusal) and the MDT commit after it
            "table/metadata/test_policy.py",
            "table/metadata/test_policy_default.py",
            "table/metadata/test_v6.py",
            "table/metadata/test_services_crash.py",
            # a compaction's MDT commit with partition_stats (its view built from the table config)
            "table/metadata/test_stats_selection.py",
        ),
    ),
    # The clean executor (~265 tests mapped): the clean tests and the MDT's clean.
    "clean-executor": (
        "services/clean/",
        "table/metadata/test_clean.py",
        "services/test_savepoint_safety.py",
        # the metadata-table policy before a clean (refusals, dry runs) and the MDT services after it
        "table/metadata/test_policy.py",
        "table/metadata/test_policy_default.py",
        "table/metadata/test_services.py",
    ),
    # The view's and builder's hot functions are mapped to ~1,200 tests; their private helpers
    # (missing_slices' `_at_risk`, `_missing_of`, ...) to the few tests mutmut's incremental stats
    # ran after they were added. `focus` maps each of their functions to every test of these files.
    **dict.fromkeys(
        ("fs-view", "fs-builder"),
        (
            "file_group/",
            "table/test_reader_history.py",
            "table/test_reader_1x.py",
            "services/test_savepoint_safety.py",
            "services/clean/test_planner.py",
            "services/clean/test_clean_1x.py",
            "services/compaction/test_planner.py",
        ),
    ),
}
# Modules whose functions `focus` maps to all their FOCUS tests (not only those the stats recorded).
FOCUS_ALL = {
    "fs-view",
    "fs-builder",
    # their FOCUS grew after a `focus` had narrowed their stats: map every FOCUS test again
    "compaction-executor",
    "compaction-scheduler",
    "compaction-operation",
    "clean-executor",
}
# shown apart: a deadlock would look like one too
SURVIVED = {0}
TARGET = 0.90
MAX_FILE_BYTES = 1 << 30


def _dotted(module: str) -> str:
    return f"{PACKAGE}/{MODULES[module]}"[: -len(".py")].replace("/", ".")


EQUIVALENT = ROOT / "tests" / "mutation" / "equivalent.txt"


def _listed() -> dict[str, tuple[str | None, str]]:
    """Mutant name -> (fingerprint or None, why it is equivalent), from equivalent.txt
    (`name [fp=HASH] reason`, # comments)."""
    found: dict[str, tuple[str | None, str]] = {}
    for line in EQUIVALENT.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, why = line.partition(" ")
            why = why.strip()
            fp = None
            if why.startswith("fp="):
                fp, _, why = why[3:].partition(" ")
            found[name] = (fp, why.strip())
    return found


def fingerprints(module: str) -> dict[str, str] | None:
    """Mutant name -> a short hash of its mutated function (its name aside), from the mutants mutmut
    generated; None when mutants/ has no mutants of ``module``. mutmut renumbers a function's mutants when
    its code changes, so a listed name may come to mean another mutant: the hash tells."""
    path = ROOT / "mutants" / PACKAGE / MODULES[module]
    if not path.exists():
        return None
    return _fingerprints_of(path, path.stat().st_mtime_ns, _dotted(module) + ".")


@functools.cache
def _fingerprints_of(path: Path, _mtime_ns: int, prefix: str) -> dict[str, str] | None:
    """Parsed once per version of the file (a mutated module is megabytes; `run` asks per module)."""
    found = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and "__mutmut_" in node.name:
            name, node.name = node.name, ""
            if not name.endswith("__mutmut_orig"):
                found[prefix + name] = hashlib.sha1(ast.dump(node).encode()).hexdigest()[:10]
    # A run whose `only_mutate` leaves the module out copies its plain source there: unknown then.
    return found or None


def stale_equivalents(module: str) -> list[str]:
    """Listed mutants of ``module`` whose mutated code is not what was listed (its fingerprint
    differs, or the mutant is gone): retested, and not counted as equivalent."""
    current = fingerprints(module)
    if current is None:
        return []
    prefix = _dotted(module) + "."
    return sorted(
        name
        for name, (fp, _) in _listed().items()
        if name.startswith(prefix) and fp is not None and current.get(name) != fp
    )


def equivalents() -> dict[str, str]:
    """Mutant name -> why it is equivalent: the listed mutants whose code is still what was listed."""
    listed = _listed()
    # Only the modules with fingerprinted entries are parsed.
    stamped = {m for m in MODULES for n, (fp, _) in listed.items() if fp and n.startswith(_dotted(m) + ".")}
    stale = {n for m in stamped for n in stale_equivalents(m)}
    return {name: why for name, (_, why) in listed.items() if name not in stale}


def stamp(modules: list[str]) -> None:
    """Give the listed mutants of ``modules`` that have no fingerprint their current one (once each
    was checked to be the mutant its reason describes: `mutmut show NAME`)."""
    prints = {n: fp for m in modules for n, fp in (fingerprints(m) or {}).items()}
    lines = []
    for line in EQUIVALENT.read_text().splitlines():
        name, _, rest = line.strip().partition(" ")
        if name in prints and not rest.startswith("fp="):
            line = f"{name} fp={prints[name]} {rest.strip()}"
        lines.append(line)
    EQUIVALENT.write_text("\n".join(lines) + "\n")


# Results kept in the repository: a full pass over the modules takes longer than a working session on a
# 2-core machine, so each session saves what it ran (`save`) and the next resumes from it. mutmut keeps a
# saved exit code only while the function's hash is unchanged, so an edited function is retested.
SAVED = ROOT / "tests" / "mutation" / "results"


def _meta(module: str) -> Path:
    return ROOT / "mutants" / f"{PACKAGE}/{MODULES[module]}.meta"


def _saved(module: str) -> Path:
    return SAVED / (MODULES[module].replace("/", "__") + ".meta")


def results(module: str) -> dict[str, int | None]:
    """Exit code per mutant: from mutants/ where a run checked it, else the saved copy's where the
    function is unchanged (a run of another module regenerates this one's mutants unchecked)."""
    current = json.loads(_meta(module).read_text()) if _meta(module).exists() else None
    saved = json.loads(_saved(module).read_text()) if _saved(module).exists() else None
    if current is None:
        return saved["exit_code_by_key"] if saved else {}
    codes = dict(current["exit_code_by_key"])
    if saved:
        prefix = len(_dotted(module)) + 1
        same = {
            f
            for f, h in current["hash_by_function_name"].items()
            if saved["hash_by_function_name"].get(f) == h
        }
        for name, code in saved["exit_code_by_key"].items():
            if codes.get(name, 0) is None and name[prefix:].rsplit("__mutmut_", 1)[0] in same:
                codes[name] = code
    return codes


def restore(module: str) -> None:
    """Seed mutants/ with the saved results before mutmut generates the mutants: it merges them in,
    keeping the exit codes of the functions whose hash did not change."""
    if _saved(module).exists() and not _meta(module).exists():
        _meta(module).parent.mkdir(parents=True, exist_ok=True)
        data = json.loads(_saved(module).read_text())
        # mutmut's loader needs its other keys too; the timings are only for its progress display.
        data |= {"type_check_error_by_key": {}, "durations_by_key": {}, "estimated_durations_by_key": {}}
        _meta(module).write_text(json.dumps(data))


def save(module: str) -> None:
    """Store the exit codes (merged as ``results`` reads them, so unchecked mutants of unchanged
    functions keep their saved code) with the function hashes of the mutants they were measured on."""
    if _meta(module).exists() and not _stale(module):
        SAVED.mkdir(exist_ok=True)
        data = json.loads(_meta(module).read_text())
        kept = {"exit_code_by_key": results(module), "hash_by_function_name": data["hash_by_function_name"]}
        _saved(module).write_text(json.dumps(kept, indent=0, sort_keys=True) + "\n")


def _stale(module: str) -> bool:
    """The source changed since mutmut last generated this module's mutants (their hashes are old)."""
    source = ROOT / PACKAGE / MODULES[module]
    return _meta(module).exists() and source.stat().st_mtime > _meta(module).stat().st_mtime


def _names(module: str, everything: bool) -> list[str]:
    """The mutant names a run of ``module`` retests: the mutants not yet killed (unchecked, survived,
    no tests) and not listed as equivalent, or all of them (a wildcard) with ``everything``; none if
    every mutant is killed or listed."""
    # Mutants listed as equivalent are not retested (they would survive again, running every test).
    skip = KILLED | TIMEOUT
    listed = equivalents()
    open_ = sorted(n for n, c in results(module).items() if c not in skip and (everything or n not in listed))
    if _stale(module):  # which functions changed shows only once mutmut regenerates: retest them all
        everything = True
    if results(module) and not open_ and not everything:
        print(f"{module}: every mutant is killed or listed as equivalent (--all retests them)")
        return []
    return open_ if results(module) and not everything else [f"{_dotted(module)}.*"]


def run(modules: list[str], everything: bool) -> int:
    """One mutmut run over the open mutants of ``modules``. With a name filter mutmut retests every
    named mutant, so a rerun names only the mutants not yet killed: an interrupted run resumes and a
    new test is tried on the survivors. ``everything`` retests all. Several modules in one run share
    its fixed costs (listing the tests, the clean run of their tests); mutmut runs the mutants
    with the fewest (fastest) tests first, whatever their module."""
    mutmut = Path(sys.executable).with_name("mutmut")
    names = [name for module in modules for name in _names(module, everything)]
    if not names:
        return 0
    workers = os.environ.get("MUTATION_WORKERS", "1")
    cmd = ["nice", "-n", "19", str(mutmut), "run", "--max-children", workers, *names]
    print("$", " ".join(cmd[:7]), f"... ({len(names)} names)" if len(names) > 1 else "", flush=True)
    env = {**os.environ, "HYPOTHESIS_PROFILE": "mutation"}
    return subprocess.run(cmd, cwd=ROOT, env=env, preexec_fn=_limit_file_size).returncode


def _limit_file_size() -> None:
    """A mutant that loops on a write (an append that never ends) once filled the disk with a 20 GB
    log file. No file grows past 1 GiB now: the write fails (Python ignores SIGXFSZ and gets EFBIG), so
    the test fails and the mutant counts as killed."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_FILE_BYTES, MAX_FILE_BYTES))


def table(modules: list[str]) -> bool:
    equivalent = equivalents()
    ok = True
    head = ("module", "mutants", "killed", "timeout", "survived", "equiv", "other", "score")
    print("{:22} {:>7} {:>6} {:>7} {:>8} {:>5} {:>5} {:>6}".format(*head))
    for module in modules:
        codes = results(module)
        if not codes:
            measured = _meta(module).exists() or _saved(module).exists()
            # mutmut mutates only undecorated functions (file_group/model.py has properties only).
            print(f"{module:22} {'no mutants' if measured else 'not run'}")
            ok &= measured
            continue
        # A listed equivalent is not retested, so it may also be left unchecked: equivalent either way.
        equiv = [n for n, c in codes.items() if c not in KILLED | TIMEOUT and n in equivalent]
        killed = sum(1 for c in codes.values() if c in KILLED)
        timeout = sum(1 for c in codes.values() if c in TIMEOUT)
        survived = sum(1 for n, c in codes.items() if c in SURVIVED and n not in equivalent)
        other = len(codes) - killed - timeout - survived - len(equiv)  # no tests, not checked, ...
        judged = len(codes) - len(equiv)
        score = (killed + timeout) / judged if judged else 1.0  # as mutmut counts: a timeout is caught
        ok &= score >= TARGET
        row = (module, len(codes), killed, timeout, survived, len(equiv), other, f"{score:.1%}")
        print("{:22} {:7} {:6} {:7} {:8} {:5} {:5} {:>6}".format(*row))
        for name in stale_equivalents(module):
            print(f"  stale equivalent (its mutant changed since it was listed; retested): {name}")
    return ok


def survivors(modules: list[str]) -> None:
    equivalent = equivalents()
    for module in modules:
        for name, code in sorted(results(module).items()):
            if code not in KILLED | TIMEOUT and name not in equivalent:
                print(code, name)


def focus(module: str) -> None:
    """Map ``module``'s functions to its FOCUS test files in mutmut's stats (which a first `run`
    collects: stop it once it prints "Running mutation testing", focus, then run again)."""
    stats_path = ROOT / "mutants" / "mutmut-stats.json"
    stats = json.loads(stats_path.read_text())
    prefix = _dotted(module) + "."
    mapped = stats["tests_by_mangled_function_name"]
    every = sorted({t for tests in mapped.values() for t in tests})

    def focused(test: str) -> bool:
        file = test.split("::")[0]
        return any(file.endswith("/" + f) or f"/lake/{f}" in file for f in FOCUS[module])

    for name, tests in mapped.items():
        if name.startswith(prefix):
            mapped[name] = [t for t in (every if module in FOCUS_ALL else tests) if focused(t)]
    stats_path.write_text(json.dumps(stats))


def kill(name: str, tests: list[str]) -> int:
    """Run ``tests`` in mutants/ with mutant ``name`` switched on and record it killed if they fail:
    for a mutant whose function mutmut's stats map to too few tests (a test added after the stats,
    or a call its tracing missed) and that a test outside that mapping kills. Not while a mutmut run
    is going: it rewrites the .meta files from memory."""
    module = next((m for m in MODULES if name.startswith(_dotted(m) + ".")), None)
    if module is None or name not in results(module):
        print(f"{name}: no such mutant")
        return 2
    env = {**os.environ, "MUTANT_UNDER_TEST": name, "HYPOTHESIS_PROFILE": "mutation"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:randomly", "-p", "no:cacheprovider", *tests]
    code = subprocess.run(cmd, cwd=ROOT / "mutants", env=env, preexec_fn=_limit_file_size).returncode
    if code != 1:  # 1: a test failed; anything else (0 passed, 2+ errors) records nothing
        print(f"{name}: not killed (pytest exit code {code})")
        return 1
    data = json.loads(_meta(module).read_text())
    data["exit_code_by_key"][name] = 1
    _meta(module).write_text(json.dumps(data))
    print(f"{name}: killed by {' '.join(tests)}")
    return 0


def main(argv: list[str]) -> int:
    command, *names = argv or ["report"]
    everything = "--all" in names
    together = "--together" in names
    names = [n for n in names if n not in ("--all", "--together")]
    unknown = [n for n in names if n not in MODULES]
    if command == "kill":
        return kill(names[0], names[1:])
    if unknown or command not in ("run", "report", "survivors", "save", "focus", "stamp"):
        print(
            f"usage: report.py run|report|survivors|save|focus|kill|stamp [{'|'.join(MODULES)} ...]; "
            f"unknown: {unknown}"
        )
        return 2
    if command == "focus":
        for module in names:
            focus(module)
        return 0
    modules = names or list(MODULES)
    if command == "survivors":
        survivors(modules)
        return 0
    if command == "stamp":
        stamp(modules)
        return 0
    if command == "save":
        for module in modules:
            save(module)
    if command == "run":
        # Every module's saved results first: the first `mutmut run` generates all modules' mutants.
        for module in MODULES:
            restore(module)
        for group in [modules] if together else [[m] for m in modules]:
            run(group, everything)
            for module in group:
                save(module)
    return 0 if table(modules) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
