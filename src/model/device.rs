//! Opening a `device` setting ([`DeviceSpec`], whose syntax is the core's) as candle's device.

use candle_core::Device;

use crate::domain::device::DeviceError;
pub use crate::domain::device::DeviceSpec;

use super::error::{one_line, LocalError};

impl From<DeviceError> for LocalError {
    fn from(e: DeviceError) -> LocalError {
        match e {
            DeviceError::NoCuda(d) => LocalError::NoCuda(d),
            DeviceError::Invalid { device, message } => LocalError::Device { device, message },
        }
    }
}

/// Opens a [`DeviceSpec`] (`cuda:N` needs a build with the `cuda` feature).
pub trait OpenDevice {
    fn open(self) -> Result<Device, LocalError>;
}

impl OpenDevice for DeviceSpec {
    fn open(self) -> Result<Device, LocalError> {
        match self {
            DeviceSpec::Cuda(_) if !cfg!(feature = "cuda") => {
                Err(LocalError::NoCuda(self.to_string()))
            }
            DeviceSpec::Cpu => Ok(Device::Cpu),
            DeviceSpec::Cuda(n) => Device::new_cuda(n).map_err(|e| LocalError::Device {
                device: format!("cuda:{n}"),
                message: one_line(&e.to_string()),
            }),
        }
    }
}

/// `cpu`, `cuda:N` or `metal:N`: how logs and `/healthz` name a device.
pub fn device_name(device: &Device) -> String {
    match device.location() {
        candle_core::DeviceLocation::Cpu => "cpu".into(),
        candle_core::DeviceLocation::Cuda { gpu_id } => format!("cuda:{gpu_id}"),
        candle_core::DeviceLocation::Metal { gpu_id } => format!("metal:{gpu_id}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gpu_is_refused_when_opened_in_a_build_without_cuda() {
        if !cfg!(feature = "cuda") {
            assert_eq!(
                DeviceSpec::Cuda(1).open().unwrap_err(),
                LocalError::NoCuda("cuda:1".into())
            );
        }
        assert!(matches!(DeviceSpec::Cpu.open(), Ok(Device::Cpu)));
    }
}
