"""Suite B, the held-out tests: new inputs, the reference's outputs expected.

- `augment`: the differential oracle: candidate inputs, the reference run on
  them in the sandbox, the kept cases as held-out tests.
- `generate`: inputs drawn afresh over the seeds' types (boundary,
  structured, random).
- `mutate`: type-aware mutations of the seeds (suite A's inputs).
- `wrong_solutions`: plausible wrong HumanEval solutions suite B must catch.
"""
