"""Run unmodified torch scripts on minima: `python -m minima.run script.py [args]`; in a notebook,
`minima.run.as_torch()`. The import hook is written in chapter 18b (`minima.torch_tree`)."""
from .torch_tree import as_torch, main, TorchFinder, MissingTorchFeature, TORCH_MODULES, minima_name, script_line

__all__ = ['as_torch', 'main', 'TorchFinder', 'MissingTorchFeature', 'TORCH_MODULES', 'minima_name', 'script_line']

if __name__ == '__main__': main()
