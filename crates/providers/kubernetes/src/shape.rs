//! A pod's shape: the CPU and memory requests and limits of the container jobs run in (pure).
//!
//! A group of one shape labels its pods with [`SHAPE_LABEL`] = [`Shape::hash`] (short and
//! stable, so it fits a label value and selects the shape's pods) and writes the shape itself
//! in the annotation [`SHAPE_ANNOTATION`], from which a manager started later learns which
//! shapes its pods have ([`Shape::from_annotation`]).

use crate::quantity::{Quantity, QuantityError};
use k8s_openapi::api::core::v1::{Container, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
use std::collections::BTreeMap;
use std::fmt;

/// The label carrying a sized pod's shape hash; the default group's pods have none.
pub const SHAPE_LABEL: &str = "flotilla.shape";
/// The annotation carrying a sized pod's shape (its [`Shape::annotation`] text).
pub const SHAPE_ANNOTATION: &str = "flotilla.shape";

/// The resources of the job container of a pod; a field left `None` keeps the template's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Shape {
    /// `resources.requests.cpu`.
    pub cpu_request: Option<Quantity>,
    /// `resources.limits.cpu`.
    pub cpu_limit: Option<Quantity>,
    /// `resources.requests.memory`.
    pub memory_request: Option<Quantity>,
    /// `resources.limits.memory`.
    pub memory_limit: Option<Quantity>,
}

/// An annotation that is not a shape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    /// A part is not `key=quantity`, or the key is not one of the four.
    #[error("{0:?} is not cpu_request, cpu_limit, memory_request or memory_limit = a quantity")]
    Part(String),
    /// A quantity that does not parse.
    #[error("{key}={value:?}: {error}")]
    Quantity {
        /// Which field.
        key: String,
        /// What it said.
        value: String,
        /// Why it does not parse.
        error: QuantityError,
    },
}

/// The four fields in the order of the annotation text.
const KEYS: [&str; 4] = ["cpu_request", "cpu_limit", "memory_request", "memory_limit"];

impl Shape {
    /// Whether it changes nothing of the template.
    pub fn is_empty(&self) -> bool {
        self.fields().iter().all(|(_, q)| q.is_none())
    }

    fn fields(&self) -> [(&'static str, Option<Quantity>); 4] {
        [
            (KEYS[0], self.cpu_request),
            (KEYS[1], self.cpu_limit),
            (KEYS[2], self.memory_request),
            (KEYS[3], self.memory_limit),
        ]
    }

    fn field_mut(&mut self, key: &str) -> Option<&mut Option<Quantity>> {
        match key {
            "cpu_request" => Some(&mut self.cpu_request),
            "cpu_limit" => Some(&mut self.cpu_limit),
            "memory_request" => Some(&mut self.memory_request),
            "memory_limit" => Some(&mut self.memory_limit),
            _ => None,
        }
    }

    /// The shape as text, with canonical quantities in a fixed order:
    /// `cpu_request=500m,memory_limit=1Gi`. Its [`Shape::hash`] is taken from it.
    pub fn annotation(&self) -> String {
        self.fields()
            .iter()
            .filter_map(|(k, q)| q.map(|q| format!("{k}={q}")))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Reads [`Shape::annotation`]'s text back.
    pub fn from_annotation(text: &str) -> Result<Shape, ShapeError> {
        let mut shape = Shape::default();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| ShapeError::Part(part.to_string()))?;
            let quantity = Quantity::parse(value).map_err(|error| ShapeError::Quantity {
                key: key.to_string(),
                value: value.to_string(),
                error,
            })?;
            *shape
                .field_mut(key)
                .ok_or_else(|| ShapeError::Part(part.to_string()))? = Some(quantity);
        }
        Ok(shape)
    }

    /// A short hash of the annotation text (FNV-1a, 64 bits, first 10 hex digits): stable
    /// across builds and processes, unlike the standard library's hasher, since pods made by
    /// one process are found by it in the next.
    pub fn hash(&self) -> String {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in self.annotation().bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        format!("{h:016x}")[..10].to_string()
    }

    /// Writes the shape into `container`'s `resources` (fields it does not set are kept).
    pub fn apply(&self, container: &mut Container) {
        let resources = container
            .resources
            .get_or_insert_with(ResourceRequirements::default);
        let put =
            |list: &mut Option<BTreeMap<String, ApiQuantity>>, name: &str, q: Option<Quantity>| {
                if let Some(q) = q {
                    list.get_or_insert_with(BTreeMap::new)
                        .insert(name.to_string(), ApiQuantity(q.to_string()));
                }
            };
        put(&mut resources.requests, "cpu", self.cpu_request);
        put(&mut resources.requests, "memory", self.memory_request);
        put(&mut resources.limits, "cpu", self.cpu_limit);
        put(&mut resources.limits, "memory", self.memory_limit);
    }

    /// `self` with the fields `over` sets replaced.
    #[must_use]
    pub fn overlaid(&self, over: &Shape) -> Shape {
        Shape {
            cpu_request: over.cpu_request.or(self.cpu_request),
            cpu_limit: over.cpu_limit.or(self.cpu_limit),
            memory_request: over.memory_request.or(self.memory_request),
            memory_limit: over.memory_limit.or(self.memory_limit),
        }
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            f.write_str("the template's resources")
        } else {
            f.write_str(&self.annotation())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(text: &str) -> Option<Quantity> {
        Some(Quantity::parse(text).unwrap())
    }

    #[test]
    fn the_annotation_is_canonical_and_reads_back() {
        let shape = Shape {
            cpu_request: q("0.5"),
            memory_limit: q("1024Mi"),
            ..Shape::default()
        };
        assert_eq!(shape.annotation(), "cpu_request=500m,memory_limit=1Gi");
        assert_eq!(Shape::from_annotation(&shape.annotation()).unwrap(), shape);
        assert_eq!(
            Shape::from_annotation("memory_limit=1Gi, cpu_request=500m").unwrap(),
            shape
        );
        assert!(matches!(
            Shape::from_annotation("disk=1Gi"),
            Err(ShapeError::Part(_))
        ));
        assert!(matches!(
            Shape::from_annotation("cpu_limit=lots"),
            Err(ShapeError::Quantity { .. })
        ));
        assert!(Shape::from_annotation("").unwrap().is_empty());
    }

    #[test]
    fn the_hash_is_short_stable_and_the_same_for_the_same_canonical_shape() {
        let a = Shape {
            cpu_request: q("500m"),
            ..Shape::default()
        };
        let b = Shape {
            cpu_request: q("0.5"),
            ..Shape::default()
        };
        let c = Shape {
            cpu_limit: q("500m"),
            ..Shape::default()
        };
        assert_eq!(a.hash(), b.hash());
        assert_ne!(a.hash(), c.hash());
        assert_eq!(a.hash().len(), 10);
        // Pinned (FNV-1a of `cpu_request=500m`, computed apart): pods made by an earlier
        // build must still be found by this one.
        assert_eq!(a.hash(), "a15c55702d");
    }

    #[test]
    fn applying_a_shape_overrides_only_what_it_sets() {
        let mut container: Container = serde_json::from_value(serde_json::json!({
            "name": "main",
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "2Gi"}}
        }))
        .unwrap();
        Shape {
            cpu_request: q("1.5"),
            memory_limit: q("1Gi"),
            ..Shape::default()
        }
        .apply(&mut container);
        let r = serde_json::to_value(container.resources.unwrap()).unwrap();
        assert_eq!(
            r,
            serde_json::json!({
                "requests": {"cpu": "1500m", "memory": "64Mi"},
                "limits": {"memory": "1Gi"}
            })
        );
    }
}
