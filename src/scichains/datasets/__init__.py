"""scichains.datasets: IDX files, MNIST and Fashion-MNIST, the Theophylline PK data."""

from ._idx import IDXError, parse_idx, read_idx, write_idx
from ._mnist import cache_dir, load_fashion_mnist, load_mnist
from ._theoph import Subject, load_theophylline

__all__ = [
    "IDXError",
    "Subject",
    "cache_dir",
    "load_fashion_mnist",
    "load_mnist",
    "load_theophylline",
    "parse_idx",
    "read_idx",
    "write_idx",
]
