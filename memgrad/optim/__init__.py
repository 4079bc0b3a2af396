"""Optimizers, as in ``torch.optim``: ``SGD``, ``Adam``, ``AdamW`` and their base class.

Example:
    >>> import memgrad as mg
    >>> model = mg.nn.Linear(3, 1)
    >>> opt = mg.optim.Adam(model.parameters(), lr=1e-2)
    >>> loss = model(mg.ones(4, 3)).pow(2).mean()
    >>> loss.backward(); opt.step(); opt.zero_grad()
"""

from memgrad.optim.adam import Adam, AdamW
from memgrad.optim.optimizer import Optimizer
from memgrad.optim.sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW"]
