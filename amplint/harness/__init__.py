"""`amplint verify`: run each rule's buggy and fixed fixture and check the rule's runtime predictions.

`command` is the entry point, `runner` runs the fixtures (in a few worker subprocesses,
through `driver`), `verdict` judges a prediction, `report` prints the table or JSON, `html`
writes the `--report` page. Nothing here imports torch.
"""
