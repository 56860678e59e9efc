import json

import pytest

from tensorfab.isa import PRESETS, ConfigError, HwConfig, get_config
from tensorfab.isa.formats import buffer_bytes


@pytest.mark.parametrize("name", list(PRESETS))
def test_presets_round_trip_json(name):
    cfg = PRESETS[name]
    assert HwConfig.from_json(cfg.to_json()) == cfg
    assert get_config(name) is cfg


def test_default_matches_vta_buffers():
    cfg = PRESETS["default"]
    sizes = buffer_bytes(cfg)
    assert (cfg.batch, cfg.block_in, cfg.block_out) == (1, 16, 16)
    assert sizes == {"inp": 32 * 1024, "wgt": 256 * 1024, "acc": 128 * 1024, "uop": 32 * 1024}
    assert cfg.mem_bus_width == 64
    assert cfg.peak_macs_per_cycle == 256


def test_tiny_fits_an_ice40up5k():
    # iCE40UP5K: 120 kbit of block RAM (15 KiB); tiny must leave room for queues
    assert sum(buffer_bytes(PRESETS["tiny"]).values()) <= 12 * 1024
    assert PRESETS["large"].peak_macs_per_cycle >= 1024


@pytest.mark.parametrize("field,value,rule", [
    ("block_in", 12, "power of two"),
    ("batch", 0, "power of two"),
    ("acc_width", 16, "only 32-bit"),
    ("inp_depth", 1 << 17, "between 2 and 65536"),
    ("mem_bus_width", 48, "power of two"),
    ("dram_addr_width", 40, "between 16 and 32"),
    ("dep_queue_depth", 3, "power of two"),
    ("clock_mhz", -5, "(0, 2000]"),
])
def test_invalid_config_names_field_and_rule(field, value, rule):
    with pytest.raises(ConfigError) as exc:
        HwConfig(**{field: value})
    assert exc.value.field == field
    assert f"HwConfig.{field}" in str(exc.value)
    assert rule in str(exc.value)


def test_unknown_json_key_is_named():
    with pytest.raises(ConfigError, match="blok_in"):
        HwConfig.from_json(json.dumps({"blok_in": 16}))


def test_a_field_given_twice_in_json_is_named(tmp_path):
    # {"block_in": 4, ..., "block_in": 16} was read as block_in 16, the 4 dropped
    # silently (JSON parsers keep the last); fpga build --config built the other core
    text = '{"name": "mine", "block_in": 4, "block_out": 4, "block_in": 16}'
    with pytest.raises(ConfigError) as exc:
        HwConfig.from_json(text)
    assert str(exc.value) == ("HwConfig.block_in = 16: given twice (first as 4); give "
                              "each field once")
    path = tmp_path / "mine.json"
    path.write_text(text)
    with pytest.raises(ConfigError) as exc:
        get_config(str(path))
    assert str(exc.value) == ("HwConfig.block_in = 16: given twice (first as 4); give "
                              f"each field once (in {path})")


def test_get_config_from_file(tmp_path):
    path = tmp_path / "mine.json"
    path.write_text(PRESETS["small"].replace(name="mine", acc_depth=512).to_json())
    cfg = get_config(str(path))
    assert cfg.name == "mine" and cfg.acc_depth == 512
    with pytest.raises(ConfigError, match="not a preset"):
        get_config("nonexistent")


def test_block_ram_fifos_is_named_in_json_only_when_set():
    """A config of today's hardware keeps the JSON (and CRC) it had before the field."""
    cfg = PRESETS["tiny"]
    assert "block_ram_fifos" not in cfg.to_dict()
    on = cfg.replace(block_ram_fifos=True)
    assert on.to_dict()["block_ram_fifos"] is True
    assert HwConfig.from_json(on.to_json()) == on
    with pytest.raises(ConfigError, match=r"HwConfig.block_ram_fifos = 1: must be true or false"):
        cfg.replace(block_ram_fifos=1)


def test_differences_name_each_parameter_with_both_values():
    tiny = PRESETS["tiny"]
    assert tiny.differences(tiny) == ""
    other = tiny.replace(inp_depth=128, clock_mhz=50.0)
    assert tiny.differences(other) == "inp_depth 256 vs 128, clock_mhz 24.0 vs 50.0"
