//! The `device` setting: where a model's tensors live (`cpu`, `cuda:N`).

use candle_core::Device;

use super::error::{one_line, LocalError};

/// A parsed `device` setting. Configuration files deserialise it straight from the string
/// (syntax only: a `cuda:N` setting in a build without the `cuda` feature still loads, so
/// `render` and `lint` work with a GPU config; opening it is refused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(try_from = "String")]
pub enum DeviceSpec {
    Cpu,
    Cuda(usize),
}

impl DeviceSpec {
    /// Parses `cpu`, `cuda` or `cuda:N`. `cuda` in a build without the `cuda` feature is an
    /// error here, so a config check catches it before any model is read.
    pub fn parse(s: &str) -> Result<DeviceSpec, LocalError> {
        let spec = DeviceSpec::syntax(s)?;
        if matches!(spec, DeviceSpec::Cuda(_)) && !cfg!(feature = "cuda") {
            return Err(LocalError::NoCuda(s.to_string()));
        }
        Ok(spec)
    }

    /// Parses `cpu`, `cuda` or `cuda:N` whatever the build supports.
    fn syntax(s: &str) -> Result<DeviceSpec, LocalError> {
        let t = s.trim().to_ascii_lowercase();
        let spec = match t.as_str() {
            "cpu" => DeviceSpec::Cpu,
            "cuda" => DeviceSpec::Cuda(0),
            _ => match t.strip_prefix("cuda:").map(str::parse::<usize>) {
                Some(Ok(n)) => DeviceSpec::Cuda(n),
                _ => {
                    return Err(LocalError::Device {
                        device: s.to_string(),
                        message:
                            "expected \"cpu\" or \"cuda:N\" (N the GPU index, e.g. \"cuda:0\")"
                                .into(),
                    })
                }
            },
        };
        Ok(spec)
    }

    /// Opens the device (`cuda:N` needs a build with the `cuda` feature).
    pub fn open(self) -> Result<Device, LocalError> {
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

impl TryFrom<String> for DeviceSpec {
    type Error = LocalError;

    fn try_from(s: String) -> Result<DeviceSpec, LocalError> {
        DeviceSpec::syntax(&s)
    }
}

/// `cpu` or `cuda:N`, as a config file writes it.
impl std::fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceSpec::Cpu => f.write_str("cpu"),
            DeviceSpec::Cuda(n) => write!(f, "cuda:{n}"),
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
    fn device_strings() {
        assert_eq!(DeviceSpec::parse("cpu").unwrap(), DeviceSpec::Cpu);
        assert_eq!(DeviceSpec::parse(" CPU ").unwrap(), DeviceSpec::Cpu);
        for bad in ["gpu", "cuda:", "cuda:x", "cuda:-1", "metal", ""] {
            let e = DeviceSpec::parse(bad).unwrap_err();
            assert!(matches!(e, LocalError::Device { .. }), "{bad}: {e}");
            assert!(
                e.to_string().contains("expected \"cpu\" or \"cuda:N\""),
                "{e}"
            );
        }
        let cuda = DeviceSpec::parse("cuda:1");
        if cfg!(feature = "cuda") {
            assert_eq!(cuda.unwrap(), DeviceSpec::Cuda(1));
        } else {
            assert_eq!(cuda.unwrap_err(), LocalError::NoCuda("cuda:1".into()));
            assert_eq!(
                DeviceSpec::parse("cuda").unwrap_err(),
                LocalError::NoCuda("cuda".into())
            );
            assert_eq!(
                DeviceSpec::Cuda(1).open().unwrap_err(),
                LocalError::NoCuda("cuda:1".into())
            );
        }
    }

    #[test]
    fn a_config_reads_the_syntax_and_writes_it_back() {
        #[derive(serde::Deserialize)]
        struct Section {
            device: DeviceSpec,
        }
        let read = |t: &str| toml::from_str::<Section>(t).map(|s| s.device);
        assert_eq!(read("device = \"cpu\"").unwrap(), DeviceSpec::Cpu);
        // Syntax only: a GPU config loads in a CPU build (opening it is what is refused).
        assert_eq!(read("device = \"cuda:2\"").unwrap(), DeviceSpec::Cuda(2));
        assert_eq!(read("device = \"cuda\"").unwrap(), DeviceSpec::Cuda(0));
        let e = read("device = \"gpu0\"").unwrap_err().to_string();
        assert!(e.contains("expected \"cpu\" or \"cuda:N\""), "{e}");
        for spec in [DeviceSpec::Cpu, DeviceSpec::Cuda(3)] {
            assert_eq!(
                DeviceSpec::parse(&spec.to_string()).ok().unwrap_or(spec),
                spec
            );
            assert_eq!(read(&format!("device = \"{spec}\"")).unwrap(), spec);
        }
    }
}
