"""Mutation testing of the bound modules with mutmut 3 (``make mutation``; see tests/MUTATION.md).

For every module name given (default: the modules of ``DEFAULT_MODULES``) this script builds a
scratch copy of the package and of the module's *fast* tests (``TESTS[module]``) under
``mutants/<module>/`` (git-ignored), writes a mutmut ``setup.cfg`` that mutates only that module and
runs only those tests, runs ``mutmut run``, and writes ``mutants/<module>/report.txt``: the score
(killed / (killed + survived)) and every survivor's name and diff. It prints one summary line per
module. Usage::

    python tests/mutation/run_mutation.py norms interpolation --jobs 2

mutmut itself copies the tree it mutates into ``mutants/`` of its working directory; running it in
a scratch copy keeps the repository's working tree (shared with other users) untouched.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MODULES = ("norms", "interpolation", "propagation", "peeling", "orders", "scoring", "spectra", "checkpoints",
                   "theorem", "stats", "results", "report")


def _tests_of(path: str, leave_out: tuple) -> list:
    """Node ids of every test function of ``path`` (relative to the repository) but those named in ``leave_out``."""
    names = re.findall(r"^def (test_\w+)", (ROOT / path).read_text(encoding="utf-8"), re.M)
    unknown = set(leave_out) - set(names)
    if unknown:
        raise ValueError(f"{path} has no test {sorted(unknown)}")
    return [f"{path}::{n}" for n in names if n not in leave_out]


#: tests/test_parallel.py without the tests that start worker processes, Dask clusters or the CLI's pool: code
#: run in another process is not traced by mutmut, and a mutant that breaks a worker stalls such a test (with
#: the CPU idle) until its timeout.
PARALLEL_FAST = _tests_of("tests/test_parallel.py", (
    "test_worker_processes_give_the_in_process_numbers", "test_progress_counts_every_matrix_group_once",
    "test_dask_local_cluster_gives_the_local_numbers", "test_dask_worker_processes_give_the_local_numbers",
    "test_an_unreachable_scheduler_is_one_clear_error_within_its_deadline",
    "test_a_killed_worker_loses_no_finished_unit", "test_cli_jobs_and_resume",
    "test_the_lean_path_agrees_with_the_dense_svd"))
#: The fast tests that exercise each module (run for every mutant; keep them quick).
TESTS = {
    "norms": ["tests/test_norms.py", "tests/test_norms_boundaries.py", "tests/test_named_mutants.py"],
    "model": ["tests/test_model.py"],
    "interpolation": ["tests/test_interpolation.py", "tests/test_interpolation_boundaries.py"],
    "propagation": ["tests/test_propagation.py", "tests/test_propagation_boundaries.py"],
    "checks": ["tests/test_checks.py"],
    # the witnesses of Chapters 1-5 (every bound attained, every weakened constant broken)
    "witnesses": ["tests/test_witnesses.py"],
    # the SymPy / closed-form checks of Chapters 1, 2, 5, 6 (each must fail on a wrong input)
    "checks_orders": ["tests/test_checks_orders.py"],
    "peeling": ["tests/test_peeling.py"],
    "orders": ["tests/test_orders.py"],
    "validation": ["tests/test_validation.py"],
    "scoring": ["tests/test_proxies_scoring.py", "tests/test_scoring_core.py", "tests/test_scoring_single_head.py",
                "tests/test_proxies.py", "tests/test_named_mutants.py", "tests/test_scoring_paths.py"],
    "spectra": ["tests/test_named_mutants.py", "tests/test_proxies.py"],
    "devices": ["tests/test_devices.py"],
    # one checkpoint's units over processes, threads, Dask; resuming; the lean factorization (issue 23)
    "parallel": ["tests/test_parallel_paths.py"] + PARALLEL_FAST,
    # reading checkpoints: the library-level readers and the hostile inputs (the CLI cases included)
    "checkpoints": ["tests/test_checkpoint_rules.py", "tests/test_checkpoints.py", "tests/test_architectures.py",
                    "tests/test_bad_inputs.py", "tests/test_bad_inputs_round2.py",
                    "tests/test_random_bert.py"],
    "theorem": ["tests/test_named_mutants.py", "tests/test_theorem.py"],
    "stats": ["tests/test_named_mutants.py", "tests/test_stats.py", "tests/test_study.py",
              "tests/test_trained_report.py"],
    "results": ["tests/test_results.py"],
    # the report rows: Chapter 6's tables (report.py); the per-matrix CSV/JSON rows are scoring's to_row
    "report": ["tests/test_report.py"],
    "reproduce": ["tests/test_reproduce.py"],
    # the figure style: SVG/PNG output and its metadata (the style's tests live with Chapter 6's figures)
    "style": ["tests/test_report.py"],
    "trained_report": ["tests/test_trained_report.py"],
    # Chapter 9's study: measures, paired intervals, sign errors, the verdict rule (issue 33)
    "study": ["tests/test_study.py"],
    # the student edition's self-checks (the chapter and generator tests skip in the scratch copy)
    "exercises": ["tests/test_exercises.py"],
    # the analysis layer's kernel and scheduler (split out of spectra and parallel)
    "kernel": PARALLEL_FAST + ["tests/test_proxies.py", "tests/test_named_mutants.py",
                               "tests/test_scoring_paths.py", "tests/test_kernel.py"],
    # the command line's exits: no thread, the run's facts looked up once a process (issues 51, 52)
    "cli": ["tests/test_cli.py", "tests/test_exit_status.py::test_a_refused_run_starts_no_thread_and_looks_nothing_up",
            "tests/test_exit_status.py::test_the_facts_are_looked_up_once_a_process_and_written_in_the_report"],
    # the report's versions and platform as importlib.metadata and platform.platform() give them (issue 52)
    "facts": ["tests/test_facts.py"],
    # the console script's entry: OpenBLAS started with the command's --threads (issue 52)
    "entry": ["tests/test_threads_policy.py"],
    "units": PARALLEL_FAST + ["tests/test_resume_content.py", "tests/test_resume_checks.py", "tests/test_units.py",
                              "tests/test_pool_choice.py::test_dense_unit_flops_are_golub_kahan",
                              "tests/test_pool_choice.py::test_gated_ffn_flops_count_both_halves"],
    # one thread limit for the API, the command and the workers, libraries loaded inside it included
    "threads": ["tests/test_threads_policy.py", "tests/test_pool_process.py"],
    # the pool's choice and its parts in this process (the stopping tests run them in spawned workers, unseen)
    "pool": ["tests/test_pool_choice.py", "tests/test_pool_inputs.py", "tests/test_pool_process.py",
             "tests/test_stopping.py::test_cgroup_v2_reads_the_process_own_group_and_its_tightest_ancestor",
             "tests/test_stopping.py::test_cgroup_v1_and_a_hybrid_layout",
             "tests/test_stopping.py::test_a_cgroup_limit_limits_the_pool",
             "tests/test_parallel.py::test_the_pool_size_is_the_smallest_limit",
             "tests/test_parallel.py::test_the_pool_size_report_names_every_number_that_entered",
             "tests/test_parallel.py::test_available_memory_without_proc_meminfo_uses_posix_or_says_unknown"],
    # every wait of the Dask clients with Dask replaced by recorders (the real listeners of test_stopping and
    # test_parallel take seconds a test and stall a run when a mutant breaks a worker)
    "cluster": ["tests/test_cluster_waits.py"],
    "single_head": ["tests/test_scoring_single_head.py"],
    "corrected": ["tests/test_theorem.py", "tests/test_named_mutants.py", "tests/test_corrected_bound.py"],
    "controls": ["tests/test_controls.py"],
    "ch3_witnesses": ["tests/test_witnesses.py"],
    # the falsification harness, exactly (its power against the chapters' weakened bounds: tests/test_checks.py)
    "harness": ["tests/test_harness.py", "tests/test_checks.py::test_falsification_counts_and_worst",
                "tests/test_checks.py::test_adversarial_search_finds_the_maximum",
                "tests/test_checks.py::test_falsify_and_power_check"],
    # Chapter 1's check: the ratios' closed forms, every draw and search call recorded (its power, a 30 s
    # search in test_checks, would cost each mutant 30 s and kills none of these tests leave)
    "ch1_norms": ["tests/test_checks_ch1.py", "tests/test_checks.py::test_norm_inequality_closed_forms",
                  "tests/test_norms_boundaries.py"],
    # Chapters 2, 4, 5: each check's own tests (random draws, searches with power, the one-line checks)
    "ch2_split": ["tests/test_checks_ch2.py", "tests/test_checks.py::test_split_random_and_nondegenerate",
                  "tests/test_checks.py::test_split_optimiser_power",
                  "tests/test_checks_statements.py::test_split_check_holds_and_fails_on_a_wrong_bound_or_without_weakening"],
    # Chapter 3, single head: every check on recorded runs, every ratio rebuilt apart (under 2 s), and the
    # fast tests of the claims; the searches with power (5-35 s each) stay in the suite
    "ch3_single_head": ["tests/test_checks_ch3.py", "tests/test_checks.py::test_block_ratio_reads_the_qk_shape",
                        "tests/test_checks.py::test_check_parameter_perturbation_says_which_claim_fails",
                        "tests/test_checks_statements.py::test_softmax_check_holds_and_a_constant_below_one_is_caught",
                        "tests/test_checks_statements.py::test_composition_claims_name_each_failure"],
    "ch3_multihead": ["tests/test_checks_ch3_multihead.py",
                      "tests/test_checks_statements.py::test_multihead_gamma_optimiser_claims"],
    "ch4_peeling": ["tests/test_checks_ch4.py"] + [f"tests/test_checks.py::{t}" for t in (
        "test_shell_falsification_has_power", "test_rounding_lemma_falsification_has_power",
        "test_shell_inflation_defaults_and_validation", "test_rounding_ratio_closed_forms",
        "test_alpha_objective_uses_each_kind_of_radius",
        "test_rounding_ratio_reads_p_and_p_prime_from_their_coordinates",
        "test_shell_inflation_messages")]
    + ["tests/test_checks_statements.py::test_shells_hold_and_dyadic_shells_passed_off_as_the_lemma_are_caught"],
    "ch5_theorem": ["tests/test_checks_ch5.py"] + [f"tests/test_checks.py::{t}" for t in (
        "test_log_factor_lemma_holds_and_the_search_has_power", "test_log_factors_closed_form",
        "test_frobenius_row_is_attained_and_the_weakened_row_fails")]
    + [f"tests/test_checks_statements.py::{t}" for t in (
        "test_theorem_constants_hold_and_a_wrong_constant_is_caught",
        "test_theorem_constants_read_the_library_log_theta",
        "test_regime_slopes_hold_and_a_wrong_frobenius_term_is_caught",
        "test_orders_in_depth_hold_and_a_swapped_table_is_caught",
        "test_log_factor_check_holds_and_an_old_factor_inside_the_band_is_caught",
        "test_theorem_constants_report_what_they_checked")],
    # stopping signals held and raised where no lock is held (the CLI and the pool's waits)
    "interrupts": ["tests/test_interrupts.py"],
    "replication_report": ["tests/test_replication_report.py"],
}
#: Where each module name lives under ``bounds_lib/`` (the names tests/MUTATION.md and ``make mutation
#: MODULES=...`` use). A subpackage (``checkpoints``, ``checks``) is mutated as a whole; any other dotted
#: path (``checkpoints.formats``) names one module.
PATHS = {
    "validation": "core.validation", "style": "core.style",
    "norms": "theory.norms", "model": "theory.model", "interpolation": "theory.interpolation",
    "propagation": "theory.propagation", "peeling": "theory.peeling", "orders": "theory.orders",
    "theorem": "theory.theorem", "checks": "checks", "checks_orders": "checks.orders", "witnesses": "checks.witnesses",
    "checkpoints": "checkpoints", "spectra": "analysis.spectra", "scoring": "analysis.scoring",
    "parallel": "analysis.parallel", "devices": "analysis.devices", "report": "analysis.report",
    "stats": "studies.stats", "results": "studies.results", "reproduce": "studies.reproduce",
    "trained_report": "studies.trained_report", "study": "studies.study", "exercises": "teaching.exercises",
    "kernel": "analysis.kernel", "units": "analysis.units", "pool": "analysis.pool",
    "threads": "analysis.threads", "cluster": "analysis.cluster", "facts": "core.facts", "entry": "__main__",
    "single_head": "analysis.single_head", "corrected": "analysis.corrected", "controls": "studies.controls",
    "ch3_witnesses": "checks.ch3_witnesses", "interrupts": "core.interrupts", "harness": "checks.harness",
    "ch1_norms": "checks.ch1_norms", "ch2_split": "checks.ch2_split", "ch4_peeling": "checks.ch4_peeling",
    "ch5_theorem": "checks.ch5_theorem", "ch3_single_head": "checks.ch3_single_head",
    "ch3_multihead": "checks.ch3_multihead",
    "replication_report": "studies.replication_report",
}


def dotted(module: str) -> str:
    """The module's dotted path under ``bounds_lib`` (``norms`` -> ``theory.norms``)."""
    return PATHS.get(module, module)


def only_mutate(module: str) -> str:
    """mutmut's ``only_mutate`` glob: one file, or every file of a subpackage."""
    rel = dotted(module).replace(".", "/")
    return f"bounds_lib/{rel}/*" if (ROOT / "bounds_lib" / rel).is_dir() else f"bounds_lib/{rel}.py"


def tests_for(module: str) -> list[str]:
    """``TESTS`` of the module, else of its subpackage (``checkpoints.formats`` -> ``checkpoints``)."""
    for key in (module, dotted(module), dotted(module).split(".")[0]):
        if key in TESTS:
            return TESTS[key]
    raise SystemExit(f"unknown module {module!r}; supported: {', '.join(sorted(TESTS))} "
                     "(and the modules of their subpackages, as subpackage.module)")


#: What every test run needs next to the tests: conftest.py and the helper modules it imports.
SUPPORT = ["tests/conftest.py", "tests/tiny_checkpoints.py", "tests/book_html.py", "tests/recording.py",
           "tests/schedule.py", "tests/durations.json", "book/tools/phone_math_report.py"]
STATUS = re.compile(r"^\s+(\S+): (\S.*)$")
#: Functions of the falsification harness that live next to the bounds (random draws, optimisers).
#: ``--bounds-only`` leaves them out: each of their mutants reruns slow optimiser tests, and their
#: power is checked directly (every harness must break a weakened bound, tests/test_checks.py). The
#: harness now lives in bounds_lib/checks/, so the flag leaves nothing out of the bound modules.
HARNESS = re.compile(r"^_?(falsify|adversarial|_?split_ratios|block_ratio|network_ratio|composition_ratio|spectral)")


def bound_functions(module: str) -> list[str]:
    """mutmut name globs for the top-level functions of ``module`` that are not harness functions."""
    import ast

    tree = ast.parse((ROOT / "bounds_lib" / f"{dotted(module).replace('.', '/')}.py").read_text())
    names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and not HARNESS.match(n.name)]
    return [f"bounds_lib.{dotted(module)}.x_{n}__mutmut_*" for n in names]


def function_globs(module: str, functions: list[str]) -> list[str]:
    """mutmut name globs for ``functions`` of ``module``: ``name`` (top level) or ``Class.method``."""
    return [f"bounds_lib.{dotted(module)}." + (f"xǁ{f.replace('.', 'ǁ')}__mutmut_*" if "." in f else f"x_{f}__mutmut_*")
            for f in functions]


def run_module(module: str, jobs: int, mutmut: str, bounds_only: bool = False, functions=None, tests=None) -> dict:
    tests_of_module = list(tests or tests_for(module))
    work = ROOT / "mutants" / module
    if work.exists():
        shutil.rmtree(work)
    (work / "tests").mkdir(parents=True)
    shutil.copytree(ROOT / "bounds_lib", work / "bounds_lib", ignore=shutil.ignore_patterns("__pycache__"))
    for t in [*SUPPORT, *tests_for(module), *tests_of_module]:
        t = t.partition("::")[0]  # a test's node id: copy its file
        if (ROOT / t).exists():
            (work / t).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / t, work / t)
    tests = "\n    ".join(tests_of_module)
    deselect = "    -m\n    not slow\n" if bounds_only else ""
    (work / "setup.cfg").write_text(
        "[mutmut]\nsource_paths=bounds_lib\n"
        # the folders of SUPPORT's files outside tests/ (mutmut copies tests/ itself)
        "also_copy=\n" + "".join(f"    {d}\n" for d in sorted({str(Path(f).parent) for f in SUPPORT
                                                              if not f.startswith("tests/")})) +
        f"only_mutate={only_mutate(module)}\n"
        f"pytest_add_cli_args_test_selection=\n    {tests}\n"
        "pytest_add_cli_args=\n    -x\n    -q\n    -p\n    no:cacheprovider\n" + deselect +
        "use_git_change_detection=false\n"
    )
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               PYTHONHASHSEED="0")
    selection = function_globs(module, functions) if functions else bound_functions(module) if bounds_only else []
    prefix = f"bounds_lib.{dotted(module)}."
    keep = [g.removeprefix(prefix).replace("__mutmut_*", "__mutmut_") for g in function_globs(module, functions or [])]
    subprocess.run([mutmut, "run", "--max-children", str(jobs), *selection], cwd=work, env=env, check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    out = subprocess.run([mutmut, "results", "--all", "true"], cwd=work, env=env, capture_output=True, text=True)
    statuses = {}
    for line in out.stdout.splitlines():
        m = STATUS.match(line)
        if m and functions and not any(m.group(1).removeprefix(prefix).startswith(k) for k in keep):
            continue
        if m and not (bounds_only and HARNESS.match(m.group(1).split(".x_")[-1])):
            statuses[m.group(1)] = m.group(2).strip()
    # detected: killed, or a timeout (the mutant made the tests hang); undetected: survived, or no test
    # runs the mutated function at all ("no tests"); "skipped"/"not checked" are left out of the score
    killed = sum(s in ("killed", "timeout") for s in statuses.values())
    survived = [k for k, s in statuses.items() if s in ("survived", "no tests")]
    other = {k: s for k, s in statuses.items() if s not in ("killed", "timeout", "survived", "no tests")}
    score = killed / max(killed + len(survived), 1)
    scope = (f" (functions: {', '.join(functions)})" if functions else
             " (bound functions only; harness left out)" if bounds_only else "")
    lines = [f"module {module}{scope}: {len(statuses)} mutants, {killed} killed (incl. timeouts), "
             f"{len(survived)} survived (incl. not run by any test), "
             f"{len(other)} other ({', '.join(sorted(set(other.values()))) or '-'}); score {score:.1%}", ""]
    for k in survived:
        diff = subprocess.run([mutmut, "show", k], cwd=work, env=env, capture_output=True, text=True).stdout
        lines += [f"## {k}", diff, ""]
    for k, s in other.items():
        lines.append(f"{k}: {s}")
    (work / "report.txt").write_text("\n".join(lines))
    print(lines[0], flush=True)
    return {"module": module, "mutants": len(statuses), "killed": killed, "survived": survived, "score": score}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("modules", nargs="*", default=list(DEFAULT_MODULES))
    ap.add_argument("--jobs", type=int, default=2, help="parallel mutant runs (default 2)")
    ap.add_argument("--bounds-only", action="store_true",
                    help="leave out the falsification-harness functions "
                         "(falsify_*, adversarial_*, their ratio helpers)")
    ap.add_argument("--functions", nargs="+", metavar="NAME",
                    help="mutate only these functions (top-level NAME or Class.method), e.g. for a large module")
    ap.add_argument("--tests", nargs="+", metavar="FILE",
                    help="run these test files instead of the module's TESTS entry (a quicker selection)")
    args = ap.parse_args(argv)
    mutmut = shutil.which("mutmut", path=str(Path(sys.executable).parent)) or shutil.which("mutmut")
    if mutmut is None:
        raise SystemExit("mutmut is not installed; install the dev extra: pip install -c constraints.txt -e '.[dev]'")
    for m in args.modules:
        run_module(m, args.jobs, mutmut, args.bounds_only, args.functions, args.tests)


if __name__ == "__main__":
    main()
