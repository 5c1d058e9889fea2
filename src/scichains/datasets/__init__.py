"""scichains.datasets: IDX files, MNIST and Fashion-MNIST, the Theophylline PK data, the Hudson
Bay lynx and hare pelt counts."""

from ._idx import IDXError, parse_idx, read_idx, write_idx
from ._lynx_hare import load_lynx_hare
from ._mnist import cache_dir, load_fashion_mnist, load_mnist
from ._theoph import Subject, load_theophylline

__all__ = [
    "IDXError",
    "Subject",
    "cache_dir",
    "load_fashion_mnist",
    "load_lynx_hare",
    "load_mnist",
    "load_theophylline",
    "parse_idx",
    "read_idx",
    "write_idx",
]
