"""The stage-1 classifier's corpus and its training (offline only).

`hacks` and `honest` build labelled solutions of synthetic tasks,
`edge_cases` holds hand-written held-out cases, and `train_classifier`
fits the weights the package ships (`weights/stage1.json`). The runtime
modules (pipeline, stage1, stage2, features, monitors) never import this
package.
"""
