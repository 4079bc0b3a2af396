"""Optimizers, as in ``torch.optim``: ``SGD``, ``Adam``, ``AdamW``, ``RMSprop``, ``Adagrad``,
``Adadelta``, ``LBFGS``, their base class, and the learning-rate schedulers of ``lr_scheduler``.

Example:
    >>> import memgrad as mg
    >>> model = mg.nn.Linear(3, 1)
    >>> opt = mg.optim.Adam(model.parameters(), lr=1e-2)
    >>> sched = mg.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)
    >>> loss = model(mg.ones(4, 3)).pow(2).mean()
    >>> loss.backward(); opt.step(); sched.step(); opt.zero_grad()
"""

from memgrad.optim import lr_scheduler
from memgrad.optim.adam import Adam, AdamW
from memgrad.optim.lbfgs import LBFGS
from memgrad.optim.optimizer import Optimizer
from memgrad.optim.rmsprop import Adadelta, Adagrad, RMSprop
from memgrad.optim.sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "LBFGS",
           "lr_scheduler"]
