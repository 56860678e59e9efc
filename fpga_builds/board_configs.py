"""Configurations by name: the presets, the configurations made for boards
(``configs/NAME.json``), or a JSON file.

:func:`board_config` is the one lookup of a ``--config`` value for every command
(``config``, ``compile``, ``run``, ``asm``, ``sim``, ``hw``, ``fpga``). It lives here,
beside the board configurations, and imports nothing but :mod:`tensorfab.isa`, so the
model commands find ``ecp5-25f`` without loading the FPGA platforms.
"""

from __future__ import annotations

from pathlib import Path

from tensorfab.isa import PRESETS, ConfigError, HwConfig, get_config

__all__ = ["CONFIG_DIR", "board_config", "board_config_names"]

#: Configurations made for boards, beyond the presets (``NAME.json``).
CONFIG_DIR = Path(__file__).parent / "configs"


def board_config_names() -> list[str]:
    """Names of the board configurations of :data:`CONFIG_DIR`, sorted."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.json"))


def board_config(name: str | Path | HwConfig) -> HwConfig:
    """A preset, a board configuration of :data:`CONFIG_DIR` by name, or a JSON file (a
    config given itself is returned as it is).

    Raises
    ------
    ConfigError
        For a name that is none of these (the message lists the presets and the board
        configurations and says that a JSON file path works too), or a JSON file that
        is not a valid config (names the file and the field).
    """
    if isinstance(name, HwConfig):
        return name
    key = str(name)
    path = CONFIG_DIR / f"{key}.json"
    if key in board_config_names():
        try:
            return HwConfig.from_json(path.read_text())
        except ConfigError as exc:
            raise ConfigError(exc.field, exc.value, f"{exc.rule} (in {path})") from exc
    if key in PRESETS or (Path(key).suffix == ".json" and Path(key).is_file()):
        return get_config(key)
    if Path(key).suffix == ".json":
        raise ConfigError("name", key, "no such JSON config file")
    raise ConfigError("name", key,
                      f"not a preset ({', '.join(PRESETS)}), a board config "
                      f"({', '.join(board_config_names())}) nor a JSON config file "
                      "(give a path such as my_config.json)")
