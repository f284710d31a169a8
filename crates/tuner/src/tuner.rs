//! Several devices under one configuration.

use serde::{Deserialize, Serialize};

use crate::{ConfigError, DeviceStatus, DeviceTuner, MemoryFigures, Report, Sample, TunerConfig};

/// An error from [`Tuner`].
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum TunerError {
    /// The configuration was rejected.
    #[error("invalid tuner configuration: {0}")]
    Config(#[from] ConfigError),
    /// A device index outside `0..devices`.
    #[error("unknown device {device}: the tuner manages {devices} device(s)")]
    UnknownDevice {
        /// The index asked for.
        device: usize,
        /// How many devices the tuner manages.
        devices: usize,
    },
}

/// Tunes the learner counts of several devices, each independently, under one
/// [`TunerConfig`]. Devices are numbered `0..devices`, in the engine's order.
///
/// Each device has its own [`DeviceTuner`]: its own search, table, memory figures and
/// monitoring. Devices do not wait for each other, so a device with less memory can settle
/// on fewer learners than its neighbours. It serialises (serde) with its whole state.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Tuner {
    config: TunerConfig,
    devices: Vec<DeviceTuner>,
}

impl Tuner {
    /// A tuner for `devices` devices, or the reason the configuration is invalid.
    pub fn new(config: TunerConfig, devices: usize) -> Result<Self, TunerError> {
        let one = DeviceTuner::new(config)?;
        Ok(Tuner { config, devices: vec![one; devices] })
    }

    /// The configuration in use.
    pub fn config(&self) -> &TunerConfig {
        &self.config
    }

    /// How many devices the tuner manages.
    pub fn devices(&self) -> usize {
        self.devices.len()
    }

    /// Replaces the configuration of every device, keeping what each has measured and where
    /// it stands (see [`DeviceTuner::set_config`]); nothing changes if it is rejected.
    pub fn set_config(&mut self, config: TunerConfig) -> Result<(), TunerError> {
        config.validate()?;
        for d in &mut self.devices {
            d.apply_config(config);
        }
        self.config = config;
        Ok(())
    }

    /// Learners each device should start with (the configured `initial_learners`).
    pub fn initial_learners(&self) -> usize {
        self.config.initial_learners
    }

    fn get_mut(&mut self, device: usize) -> Result<&mut DeviceTuner, TunerError> {
        let devices = self.devices.len();
        self.devices.get_mut(device).ok_or(TunerError::UnknownDevice { device, devices })
    }

    /// One device's tuner.
    pub fn device(&self, device: usize) -> Result<&DeviceTuner, TunerError> {
        self.devices.get(device).ok_or(TunerError::UnknownDevice { device, devices: self.devices.len() })
    }

    /// Takes one measurement window of `device`; see [`DeviceTuner::observe`].
    pub fn observe(&mut self, device: usize, sample: &Sample) -> Result<Report, TunerError> {
        Ok(self.get_mut(device)?.observe(sample))
    }

    /// Replaces `device`'s memory figures; see [`DeviceTuner::set_memory`].
    pub fn set_memory(&mut self, device: usize, figures: MemoryFigures) -> Result<Report, TunerError> {
        Ok(self.get_mut(device)?.set_memory(figures))
    }

    /// The engine could not apply `device`'s pending change; see
    /// [`DeviceTuner::change_failed`].
    pub fn change_failed(&mut self, device: usize) -> Result<Report, TunerError> {
        Ok(self.get_mut(device)?.change_failed())
    }

    /// Re-opens tuning on `device`; see [`DeviceTuner::retune`].
    pub fn retune(&mut self, device: usize) -> Result<Report, TunerError> {
        Ok(self.get_mut(device)?.retune())
    }

    /// `device`'s last report.
    pub fn last_report(&self, device: usize) -> Result<&Report, TunerError> {
        Ok(self.device(device)?.last_report())
    }

    /// Whether every device has settled.
    pub fn all_settled(&self) -> bool {
        self.devices.iter().all(DeviceTuner::is_settled)
    }

    /// A serializable snapshot of every device, in device order (allocates; for logs).
    pub fn status(&self) -> Vec<DeviceStatus> {
        self.devices.iter().map(DeviceTuner::status).collect()
    }
}
