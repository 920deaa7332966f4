"""`amplint verify`: run each rule's buggy and fixed fixture and check the rule's runtime predictions.

`command` is the entry point, `runner` runs the fixtures (one subprocess per rule, through
`driver`), `verdict` judges a prediction, `report` prints the table. Nothing here imports torch.
"""
