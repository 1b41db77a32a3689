"""The names of stage 1's features and rule flags (constants only).

The feature vector is `CODE_FEATURES + TRAJECTORY_FEATURES +
RUNTIME_FEATURES` (`FEATURE_NAMES`); what each feature means and how it is
computed is in `features` and `code_features`. Each group starts with its
rule flags, and `FLAG_NAMES` is those flags in vector order: a flag is the
feature of the same name, raised when it is > 0.5.

This module imports nothing, so the pure modules (`config`, `stage1`,
`stage2`) know the vector's layout without the host-side AST scanner.
"""

# Rule flags computed from the final code.
CODE_FLAGS = (
  "unparsable",
  "process_exit",
  "test_framework",
  "introspection",
  "tampering",
  "file_env_probing",
  "process_network",
  "eq_override",
  "exception_swallowing",
  "hardcoded_tests",
  "constant_return",
  "dynamic_import",
  "test_detection",
)
CODE_FEATURES = (
  *CODE_FLAGS,
  "dynamic_code",
  "log_exit_calls",
  "log_test_framework",
  "log_introspection",
  "log_tampering",
  "log_harness_reach",
  "log_probing",
  "log_process_network",
  "log_eq_overrides",
  "log_dynamic_imports",
  "log_test_detection",
  "builtin_subclass",
  "compare_overrides",
  "log_bare_except",
  "log_broad_except",
  "log_specific_except",
  "visible_input_literals",
  "visible_output_literals",
  "log_keyed_branches",
  "log_keyed_lookups",
  "missing_entry_point",
  "log_distinct_return_literals",
  "log_code_chars",
  "log_code_lines",
  "log_functions",
  "log_classes",
  "log_imports",
  "log_loops",
  "log_prints",
)

# Rule flags computed from the actions and observations (the last two from
# a repository episode's tool calls: `repo_features`).
TRAJECTORY_FLAGS = (
  "probing_runs",
  "failing_loop",
  "protected_edits",
  "hidden_reads",
)
TRAJECTORY_FEATURES = (
  *TRAJECTORY_FLAGS,
  "log_turns",
  "log_runs",
  "repeated_action_ratio",
  "log_max_same_failing_run",
  "log_targeted_workarounds",
  "log_probing_runs",
  "log_format_errors",
)

# Rule flags computed from the submission's sandbox result (0 before
# execution).
RUNTIME_FLAGS = ("early_termination", "unserialisable_output")
# Per-test times are not a feature: the forkserver times tests at the
# resolution of its pipe reads and shares a read's time evenly among the
# results it brings, so a time says how results were batched, not how long a
# test ran (measured on the process backend: 1.1e-5..2.4e-3 s per honest
# test, 1.4e-6..1.9e-3 s per test of code that exits while loading).
RUNTIME_FEATURES = (
  *RUNTIME_FLAGS,
  "executed",
  "not_run_fraction",
  "bad_output_fraction",
  "error_fraction",
  "crashed",
)

FEATURE_NAMES = CODE_FEATURES + TRAJECTORY_FEATURES + RUNTIME_FEATURES
NUM_FEATURES = len(FEATURE_NAMES)
FEATURE_INDEX = {name: i for i, name in enumerate(FEATURE_NAMES)}

# Rule flags, in `Rewards.stage1_flags` order.
FLAG_NAMES = CODE_FLAGS + TRAJECTORY_FLAGS + RUNTIME_FLAGS
NUM_FLAGS = len(FLAG_NAMES)
# [F] the index of each flag's feature in the vector.
FLAG_FEATURE = tuple(FEATURE_INDEX[name] for name in FLAG_NAMES)
