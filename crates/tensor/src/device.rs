use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The kind of a compute device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    /// A group of CPU cores acting as one device.
    Cpu,
    /// A CUDA GPU.
    Cuda,
}

/// One compute device: a CPU device (a worker thread or small pool) or a CUDA GPU by ordinal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Device {
    /// CPU device number `i` (`cpu:i`).
    Cpu(usize),
    /// CUDA device with ordinal `i` (`cuda:i`).
    Cuda(usize),
}

impl Device {
    /// The device kind.
    pub fn kind(&self) -> DeviceKind {
        match self {
            Device::Cpu(_) => DeviceKind::Cpu,
            Device::Cuda(_) => DeviceKind::Cuda,
        }
    }

    /// The index (CPU device number or CUDA ordinal).
    pub fn index(&self) -> usize {
        match *self {
            Device::Cpu(i) | Device::Cuda(i) => i,
        }
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu(i) => write!(f, "cpu:{i}"),
            Device::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}

impl FromStr for Device {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (kind, idx) = s.split_once(':').ok_or_else(|| format!("device '{s}' must look like cpu:N or cuda:N"))?;
        let i: usize = idx.parse().map_err(|_| format!("device '{s}': '{idx}' is not a device index"))?;
        match kind {
            "cpu" => Ok(Device::Cpu(i)),
            "cuda" => Ok(Device::Cuda(i)),
            _ => Err(format!("device '{s}': unknown kind '{kind}' (expected cpu or cuda)")),
        }
    }
}

impl Serialize for Device {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Device {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// The user's device selection, as given to `--devices`.
///
/// | text | meaning |
/// |---|---|
/// | `auto` | every CUDA GPU if a driver and a GPU are present, else one CPU device |
/// | `cpu` | one CPU device (`cpu:1`) |
/// | `cpu:N` | `N` CPU devices, `cpu:0` .. `cpu:N-1` |
/// | `cuda` | every CUDA GPU (an error if there is none) |
/// | `cuda:0,2` | the listed GPUs |
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceSpec {
    /// Choose at run time.
    Auto,
    /// This many CPU devices.
    Cpu(usize),
    /// Every CUDA GPU.
    CudaAll,
    /// These CUDA ordinals, in order, without repeats.
    Cuda(Vec<usize>),
}

impl DeviceSpec {
    /// The concrete devices for a CPU spec, or `None` for specs that need CUDA discovery.
    pub fn cpu_devices(&self) -> Option<Vec<Device>> {
        match self {
            DeviceSpec::Cpu(n) => Some((0..*n).map(Device::Cpu).collect()),
            _ => None,
        }
    }
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceSpec::Auto => write!(f, "auto"),
            DeviceSpec::Cpu(n) => write!(f, "cpu:{n}"),
            DeviceSpec::CudaAll => write!(f, "cuda"),
            DeviceSpec::Cuda(v) => {
                write!(f, "cuda:")?;
                for (i, d) in v.iter().enumerate() {
                    if i > 0 {
                        write!(f, ",")?;
                    }
                    write!(f, "{d}")?;
                }
                Ok(())
            }
        }
    }
}

impl FromStr for DeviceSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        match t {
            "auto" => return Ok(DeviceSpec::Auto),
            "cpu" => return Ok(DeviceSpec::Cpu(1)),
            "cuda" | "gpu" => return Ok(DeviceSpec::CudaAll),
            _ => {}
        }
        let (kind, rest) = t
            .split_once(':')
            .ok_or_else(|| format!("devices '{s}': expected auto, cpu, cpu:N, cuda or cuda:I[,J...]"))?;
        match kind {
            "cpu" => {
                let n: usize =
                    rest.parse().map_err(|_| format!("devices '{s}': '{rest}' is not a number of CPU devices"))?;
                if n == 0 {
                    return Err(format!(
                        "devices '{s}': cpu:N is the number of CPU devices, at least 1 (cpu:1 is one device, which the run calls cpu:0)"
                    ));
                }
                Ok(DeviceSpec::Cpu(n))
            }
            "cuda" | "gpu" => {
                let mut v = Vec::new();
                for part in rest.split(',') {
                    let i: usize = part
                        .trim()
                        .parse()
                        .map_err(|_| format!("devices '{s}': '{part}' is not a CUDA device ordinal"))?;
                    if v.contains(&i) {
                        return Err(format!("devices '{s}': cuda:{i} is listed twice"));
                    }
                    v.push(i);
                }
                Ok(DeviceSpec::Cuda(v))
            }
            _ => Err(format!("devices '{s}': unknown kind '{kind}' (expected cpu or cuda)")),
        }
    }
}

impl Serialize for DeviceSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for DeviceSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_print_devices() {
        assert_eq!("cpu:3".parse::<Device>().unwrap(), Device::Cpu(3));
        assert_eq!(Device::Cuda(1).to_string(), "cuda:1");
        assert!("tpu:0".parse::<Device>().is_err());
        assert!("cpu".parse::<Device>().is_err());
    }

    #[test]
    fn parse_specs() {
        assert_eq!("auto".parse::<DeviceSpec>().unwrap(), DeviceSpec::Auto);
        assert_eq!("cpu".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cpu(1));
        assert_eq!("cpu:2".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cpu(2));
        assert_eq!("cuda".parse::<DeviceSpec>().unwrap(), DeviceSpec::CudaAll);
        assert_eq!("cuda:0,1".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cuda(vec![0, 1]));
        for bad in ["cpu:0", "cpu:x", "cuda:0,0", "cuda:a", "tpu:1", "xyz"] {
            let e = bad.parse::<DeviceSpec>().unwrap_err();
            assert!(e.contains(bad), "{e}");
        }
        assert_eq!(DeviceSpec::Cuda(vec![0, 2]).to_string(), "cuda:0,2");
        assert_eq!(DeviceSpec::Cpu(2).cpu_devices().unwrap(), vec![Device::Cpu(0), Device::Cpu(1)]);
    }

    #[test]
    fn serde_as_strings() {
        let j = serde_json::to_string(&DeviceSpec::Cuda(vec![0, 1])).unwrap();
        assert_eq!(j, "\"cuda:0,1\"");
        assert_eq!(serde_json::from_str::<DeviceSpec>(&j).unwrap(), DeviceSpec::Cuda(vec![0, 1]));
        assert_eq!(serde_json::to_string(&Device::Cpu(0)).unwrap(), "\"cpu:0\"");
    }
}
