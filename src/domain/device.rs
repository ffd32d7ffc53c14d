//! The `device` setting: where a model's tensors live (`cpu`, `cuda:N`). Its syntax lives in
//! the core, so that a build without the local judge (`--no-default-features`) still reads, and
//! refuses nothing of, a configuration written for a GPU; opening a device is `model`'s.

/// A parsed `device` setting. Configuration files deserialise it straight from the string
/// (syntax only: a `cuda:N` setting in a build without the `cuda` feature still loads, so
/// `render` and `lint` work with a GPU config; opening it is refused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(try_from = "String")]
pub enum DeviceSpec {
    Cpu,
    Cuda(usize),
}

/// A `device` setting that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeviceError {
    /// `cuda:N` in a build without the `cuda` feature.
    #[error("device {0:?}: this gavel was built without CUDA; rebuild with --features cuda")]
    NoCuda(String),
    /// A device string that is neither `cpu` nor `cuda:N`.
    #[error("device {device:?}: {message}")]
    Invalid { device: String, message: String },
}

impl DeviceSpec {
    /// Parses `cpu`, `cuda` or `cuda:N`. `cuda` in a build without the `cuda` feature is an
    /// error here, so a config check catches it before any model is read.
    pub fn parse(s: &str) -> Result<DeviceSpec, DeviceError> {
        let spec = DeviceSpec::syntax(s)?;
        if matches!(spec, DeviceSpec::Cuda(_)) && !cfg!(feature = "cuda") {
            return Err(DeviceError::NoCuda(s.to_string()));
        }
        Ok(spec)
    }

    /// Parses `cpu`, `cuda` or `cuda:N` whatever the build supports.
    fn syntax(s: &str) -> Result<DeviceSpec, DeviceError> {
        let t = s.trim().to_ascii_lowercase();
        let spec = match t.as_str() {
            "cpu" => DeviceSpec::Cpu,
            "cuda" => DeviceSpec::Cuda(0),
            _ => match t.strip_prefix("cuda:").map(str::parse::<usize>) {
                Some(Ok(n)) => DeviceSpec::Cuda(n),
                _ => {
                    return Err(DeviceError::Invalid {
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
}

impl TryFrom<String> for DeviceSpec {
    type Error = DeviceError;

    fn try_from(s: String) -> Result<DeviceSpec, DeviceError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_strings() {
        assert_eq!(DeviceSpec::parse("cpu").unwrap(), DeviceSpec::Cpu);
        assert_eq!(DeviceSpec::parse(" CPU ").unwrap(), DeviceSpec::Cpu);
        for bad in ["gpu", "cuda:", "cuda:x", "cuda:-1", "metal", ""] {
            let e = DeviceSpec::parse(bad).unwrap_err();
            assert!(matches!(e, DeviceError::Invalid { .. }), "{bad}: {e}");
            assert!(
                e.to_string().contains("expected \"cpu\" or \"cuda:N\""),
                "{e}"
            );
        }
        let cuda = DeviceSpec::parse("cuda:1");
        if cfg!(feature = "cuda") {
            assert_eq!(cuda.unwrap(), DeviceSpec::Cuda(1));
        } else {
            assert_eq!(cuda.unwrap_err(), DeviceError::NoCuda("cuda:1".into()));
            assert_eq!(
                DeviceSpec::parse("cuda").unwrap_err(),
                DeviceError::NoCuda("cuda".into())
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
