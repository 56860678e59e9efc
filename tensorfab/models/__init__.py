"""tensorfab.models: small real models made by code in the repository from fixed seeds
(trained in numpy on data sets that PyPI packages ship), exported as ONNX."""

from .digits_cnn import DigitsCNN, digits_cnn_onnx, load_digits_split, train_digits_cnn
from .resnet import resnet18_onnx, resnet_onnx

__all__ = ["DigitsCNN", "digits_cnn_onnx", "load_digits_split", "resnet18_onnx",
           "resnet_onnx", "train_digits_cnn"]
