"""cagrad.nn: Module, Parameter and a set of layers, with torch.nn's names and behaviour."""

from . import activation, functional, init, utils
from .activation import *  # noqa: F403 (every activation module: activation.__all__)
from .container import ModuleDict, ModuleList, ParameterDict, ParameterList, Sequential
from .layers import Conv2d, Dropout, Embedding, Flatten, Identity, LayerNorm, Linear
from .loss import CrossEntropyLoss, MSELoss, NLLLoss
from .module import Module
from .parameter import Parameter
# composite layers and losses (h4)
from .conv import Conv1d
from .dropout import AlphaDropout, Dropout1d, Dropout2d, Dropout3d, FeatureAlphaDropout
from .loss import (BCELoss, BCEWithLogitsLoss, CosineSimilarity, HuberLoss, KLDivLoss, L1Loss,
                   PairwiseDistance, SmoothL1Loss, SoftMarginLoss)
from .multihead import MultiheadAttention
from .normalization import (BatchNorm1d, BatchNorm2d, BatchNorm3d, GroupNorm, InstanceNorm1d,
                            InstanceNorm2d, InstanceNorm3d, RMSNorm)
# data parallelism on a CPU-only library (h2)
from . import parallel
from .parallel import DataParallel
# pooling (op-table rows)
from .pooling import AdaptiveAvgPool2d, AvgPool1d, AvgPool2d, MaxPool1d, MaxPool2d
# reshaping / resampling layers and transposed convolutions (h14)
from .conv_transpose import ConvTranspose1d, ConvTranspose2d
from .rnn import GRU, LSTM, RNN
from .transformer import TransformerEncoder, TransformerEncoderLayer
from .shape import (Fold, PixelShuffle, PixelUnshuffle, Unflatten, Unfold, Upsample,
                    UpsamplingBilinear2d, UpsamplingNearest2d)

__all__ = [
    "functional", "init", "Module", "Parameter", "Sequential", "ModuleList", "Identity",
    "Linear", "Conv2d", "LayerNorm", "Embedding", "Dropout", "Flatten", "CrossEntropyLoss",
    "NLLLoss", "MSELoss", *activation.__all__,
    "utils", "ModuleDict", "ParameterList", "ParameterDict",
    "Conv1d", "AlphaDropout", "Dropout1d", "Dropout2d", "Dropout3d", "FeatureAlphaDropout",
    "BCELoss", "BCEWithLogitsLoss", "CosineSimilarity", "HuberLoss", "KLDivLoss", "L1Loss",
    "PairwiseDistance", "SmoothL1Loss", "SoftMarginLoss", "MultiheadAttention",
    "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "GroupNorm", "InstanceNorm1d",
    "InstanceNorm2d", "InstanceNorm3d", "RMSNorm",
    "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d", "MaxPool1d", "AvgPool1d",
    "parallel", "DataParallel",
    "ConvTranspose1d", "ConvTranspose2d", "Fold", "PixelShuffle", "PixelUnshuffle",
    "Unflatten", "Unfold", "Upsample", "UpsamplingBilinear2d", "UpsamplingNearest2d",
    "RNN", "LSTM", "GRU", "TransformerEncoder", "TransformerEncoderLayer",
]

# margin / embedding / likelihood losses and extra layers
from . import layers_extra, loss_extra  # noqa: E402
from .layers_extra import *  # noqa: E402,F403
from .loss_extra import *  # noqa: E402,F403

__all__ += loss_extra.__all__ + layers_extra.__all__

# RNN cells and padding layers
from . import padding  # noqa: E402
from .padding import *  # noqa: E402,F403
from .rnn import GRUCell, LSTMCell, RNNCell, RNNCellBase  # noqa: E402

__all__ += ["RNNCellBase", "RNNCell", "LSTMCell", "GRUCell"] + padding.__all__

# module hooks' global registry, packed sequences, transformer decoder, more layers
from . import modules  # noqa: E402
from . import layers_more  # noqa: E402
from .layers_more import *  # noqa: E402,F403
from .transformer import Transformer, TransformerDecoder, TransformerDecoderLayer  # noqa: E402

__all__ += ["modules", "Transformer", "TransformerDecoder", "TransformerDecoderLayer"]
__all__ += layers_more.__all__

# CTCLoss, AdaptiveLogSoftmaxWithLoss, Conv3d, ConvTranspose3d, AdaptiveAvgPool3d
from . import layers_ctc_conv3d  # noqa: E402
from .layers_ctc_conv3d import *  # noqa: E402,F403

__all__ += layers_ctc_conv3d.__all__

# lazy modules (LazyLinear, LazyConv1d/2d, LazyBatchNorm1d/2d) and their placeholders
from . import _lazy  # noqa: E402
from ._lazy import (LazyBatchNorm1d, LazyBatchNorm2d, LazyConv1d, LazyConv2d,  # noqa: E402
                    LazyLinear, UninitializedBuffer, UninitializedParameter)
from . import parameter as _parameter_module  # noqa: E402

# torch.nn.parameter.UninitializedParameter / UninitializedBuffer, as PyTorch places them
_parameter_module.UninitializedParameter = UninitializedParameter
_parameter_module.UninitializedBuffer = UninitializedBuffer
__all__ += ["LazyBatchNorm1d", "LazyBatchNorm2d", "LazyConv1d", "LazyConv2d", "LazyLinear",
            "UninitializedBuffer", "UninitializedParameter"]

# more pooling / losses / lazy modules, SyncBatchNorm, nn.Buffer, RNNBase (h39 census)
from . import _layers_census  # noqa: E402
from ._layers_census import *  # noqa: E402,F403
from .rnn import RNNBase  # noqa: E402

__all__ += _layers_census.__all__ + ["RNNBase"]
