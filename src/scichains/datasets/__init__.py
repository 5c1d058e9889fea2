"""scichains.datasets: IDX files, MNIST and Fashion-MNIST."""

from ._idx import IDXError, parse_idx, read_idx, write_idx
from ._mnist import cache_dir, load_fashion_mnist, load_mnist

__all__ = [
    "IDXError",
    "cache_dir",
    "load_fashion_mnist",
    "load_mnist",
    "parse_idx",
    "read_idx",
    "write_idx",
]
