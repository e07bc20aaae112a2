"""The bottom layer: the NumPy/PyTensor array namespace, compilation, argument checks."""
