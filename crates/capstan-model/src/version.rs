//! Kubernetes versions (`v1.31.4`): parsing and the skew rules kubeadm enforces.

use std::fmt;
use std::str::FromStr;

/// A Kubernetes release version, `vMAJOR.MINOR.PATCH` with an optional pre-release/build suffix.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KubernetesVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
    /// Anything after the patch number (`-rc.1`, `+build`), kept for display.
    pub suffix: String,
}

/// A version string that is not `vMAJOR.MINOR.PATCH`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0:?} is not a Kubernetes version: write it as vMAJOR.MINOR.PATCH, e.g. v1.31.4")]
pub struct VersionError(pub String);

impl FromStr for KubernetesVersion {
    type Err = VersionError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let err = || VersionError(text.to_owned());
        let body = text.strip_prefix('v').ok_or_else(err)?;
        let split = body.find(['-', '+']).unwrap_or(body.len());
        let (numbers, suffix) = body.split_at(split);
        let mut parts = numbers
            .split('.')
            .map(|p| p.parse::<u32>().map_err(|_| err()));
        let major = parts.next().ok_or_else(err)??;
        let minor = parts.next().ok_or_else(err)??;
        let patch = parts.next().ok_or_else(err)??;
        if parts.next().is_some() {
            return Err(err());
        }
        Ok(Self {
            major,
            minor,
            patch,
            suffix: suffix.to_owned(),
        })
    }
}

impl fmt::Display for KubernetesVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "v{}.{}.{}{}",
            self.major, self.minor, self.patch, self.suffix
        )
    }
}

impl KubernetesVersion {
    /// Whether this version is at least `major.minor`.
    pub fn at_least(&self, major: u32, minor: u32) -> bool {
        (self.major, self.minor) >= (major, minor)
    }

    /// How many minor versions `self` is behind `newer` (0 when not behind; majors other than 1 count
    /// as far apart).
    pub fn minors_behind(&self, newer: &Self) -> u32 {
        if self.major != newer.major {
            return if self.major < newer.major {
                u32::MAX
            } else {
                0
            };
        }
        newer.minor.saturating_sub(self.minor)
    }
}

/// How many minor versions a kubelet may lag the control plane (Kubernetes ≥ 1.28 allows three).
pub const MAX_KUBELET_MINOR_SKEW: u32 = 3;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_compare() {
        let v: KubernetesVersion = "v1.29.3".parse().unwrap();
        assert_eq!((v.major, v.minor, v.patch), (1, 29, 3));
        assert!(v.at_least(1, 29));
        assert!(!v.at_least(1, 30));
        let rc: KubernetesVersion = "v1.30.0-rc.1".parse().unwrap();
        assert_eq!(rc.to_string(), "v1.30.0-rc.1");
        assert!(rc > v);
        assert_eq!(v.minors_behind(&rc), 1);
        assert_eq!(rc.minors_behind(&v), 0);
        for bad in ["1.29.3", "v1.29", "v1.x.3", "v1.2.3.4", ""] {
            assert!(bad.parse::<KubernetesVersion>().is_err(), "{bad}");
        }
    }
}
