"""Utilities with PyTorch's names: ``memgrad.utils.data`` (datasets, samplers, ``DataLoader``,
``random_split``), as ``torch.utils.data``.

Example:
    >>> import memgrad as mg
    >>> from memgrad.utils.data import DataLoader, TensorDataset
    >>> len(DataLoader(TensorDataset(mg.arange(10)), batch_size=4))
    3
"""

from memgrad.utils import data

__all__ = ["data"]
