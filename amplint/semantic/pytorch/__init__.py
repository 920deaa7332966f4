"""What amplint knows about PyTorch, as data, in one place.

- `api`: the dotted names of the AMP API (autocast, GradScaler, clipping, no-grad contexts,
  dtypes), the module and optimizer methods amplint reads, and the import-alias table that
  maps local names to them;
- `autocast_ops`: what autocast does to each op (PyTorch's op lists) and the names ops go by;
- `deprecated_api`: the deprecated per-device AMP API and its `torch.amp` replacements;
- `frameworks`: the training frameworks that may own a loss scaler (accelerate, Lightning,
  Fabric): how each is built, which setting is its precision, what its methods do;
- `vocabulary`: the naming conventions amplint falls back on where code does not say what a
  thing is (`opt_g` is an optimizer, `accelerator.backward` scales).

A new PyTorch name or table goes here, not into the module that first needs it.
"""
