//! Entry points for fuzz targets and corpus replays; each must never panic on any bytes.
