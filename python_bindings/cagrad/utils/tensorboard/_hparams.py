"""The three summaries of SummaryWriter.add_hparams, hand-encoded: the HParams plugin's
Experiment (which hyperparameters and metrics exist), SessionStartInfo (this run's values)
and SessionEndInfo (status SUCCESS), each in the SummaryMetadata of an otherwise empty
Summary.Value, as torch writes them (field numbers from tensorboard's
plugins/hparams/api.proto and plugin_data.proto)."""

from . import _records as rec

_PLUGIN = "hparams"
EXPERIMENT_TAG = "_hparams_/experiment"
SESSION_START_INFO_TAG = "_hparams_/session_start_info"
SESSION_END_INFO_TAG = "_hparams_/session_end_info"
_FLOAT64, _STRING, _BOOL = 3, 1, 2  # DataType
_STATUS_SUCCESS = 1


def _value(kind, v):
    """google.protobuf.Value: number_value=2, string_value=3, bool_value=4 (a oneof, so
    written even when it is the default)."""
    if kind == _FLOAT64:
        return rec.f_double(2, v)
    if kind == _STRING:
        return rec.f_bytes(3, v)
    return rec.f_varint(4, int(bool(v)))


def _kind_and_value(v):
    """(DataType, value) of one hyperparameter, as torch classifies it: an int, float or
    bool (bool being an int) is a number, then strings, then one-element tensors."""
    if isinstance(v, (int, float)):
        return _FLOAT64, float(v)
    if isinstance(v, str):
        return _STRING, v
    if hasattr(v, "detach") and hasattr(v, "numpy"):
        return _FLOAT64, float(v.detach().numpy().reshape(-1)[0])
    raise ValueError("value should be one of int, float, str, bool, or torch.Tensor")


def _check(hparam_dict, metric_dict, domains):
    if not isinstance(hparam_dict, dict):
        raise TypeError("parameter: hparam_dict should be a dictionary, nothing logged.")
    if not isinstance(metric_dict, dict):
        raise TypeError("parameter: metric_dict should be a dictionary, nothing logged.")
    if not isinstance(domains, dict):
        raise TypeError("parameter: hparam_domain_discrete should be a dictionary, nothing "
                        "logged.")
    for k, v in domains.items():
        if (k not in hparam_dict or not isinstance(v, list)
                or not all(isinstance(d, type(hparam_dict[k])) for d in v)):
            raise TypeError(f"parameter: hparam_domain_discrete[{k}] should be a list of same "
                            f"type as hparam_dict[{k}].")


def _plugin_summary(tag, data_field, message):
    """A Summary whose one value has only tag and metadata: the plugin data is
    HParamsPluginData {version=1 (0, left out), <data_field>=message}."""
    content = rec.f_bytes(data_field, message)
    return rec.summary_value(tag, metadata=rec.plugin_metadata(_PLUGIN, content))


def hparams(hparam_dict, metric_dict, hparam_domain_discrete=None):
    """(experiment, session_start_info, session_end_info) Summary bytes."""
    domains = hparam_domain_discrete or {}
    _check(hparam_dict, metric_dict, domains)
    infos, entries = b"", b""
    for k, v in hparam_dict.items():
        if v is None:
            continue
        kind, value = _kind_and_value(v)
        # SessionStartInfo.hparams (map field 1): entries {key=1, value=2}
        entries += rec.f_bytes(1, rec.f_bytes(1, k) + rec.f_bytes(2, _value(kind, value)))
        # HParamInfo {name=1, type=4, domain_discrete=5 (ListValue {values=1})}
        info = rec.f_bytes(1, k) + rec.f_varint(4, kind)
        if k in domains and not hasattr(v, "numpy"):
            listed = b"".join(rec.f_bytes(1, _value(kind, d)) for d in domains[k])
            info += rec.f_bytes(5, listed)
        infos += rec.f_bytes(4, info)  # Experiment.hparam_infos = 4
    # Experiment.metric_infos = 5: MetricInfo {name=1: MetricName {tag=2}}
    metrics = b"".join(rec.f_bytes(5, rec.f_bytes(1, rec.f_bytes(2, k))) for k in metric_dict)
    return (_plugin_summary(EXPERIMENT_TAG, 2, infos + metrics),
            _plugin_summary(SESSION_START_INFO_TAG, 3, entries),
            _plugin_summary(SESSION_END_INFO_TAG, 4, rec.f_varint(1, _STATUS_SUCCESS)))
