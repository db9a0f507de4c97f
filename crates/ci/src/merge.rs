//! GitLab's deep merge (Ruby's `Hash#deep_merge`), used by `include` and `extends`: hashes merge
//! key by key, recursively; anything else (arrays, scalars, null) from the overriding side
//! replaces the base. Keys keep the base's order; new keys are appended. Positions are those
//! of the overriding side, where the merged value was last written.

use super::yaml::{Node, Value};

/// Merge `over` onto `base`.
pub(crate) fn deep_merge(base: Node, over: Node) -> Node {
    match (base.value, over.value) {
        (Value::Map(mut base_map), Value::Map(over_map)) => {
            for (key, value) in over_map.into_entries() {
                let merged = match base_map.take(&key.name) {
                    Some(existing) => deep_merge(existing, value),
                    None => value,
                };
                // The key keeps the base's place but takes the overriding side's position:
                // errors and warnings point at the key that applies.
                base_map.replace(key, merged);
            }
            Node::new(Value::Map(base_map), over.at)
        }
        (_, value) => Node::new(value, over.at),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::yaml::load;
    use super::*;

    fn doc(text: &str) -> Node {
        let file: Arc<str> = Arc::from("t.yml");
        load(text, &file).unwrap().documents.remove(0)
    }

    #[test]
    fn hashes_merge_arrays_replace() {
        let base = doc("v: {A: 1, B: 1}\ns: [a, b]\nk: 1\n");
        let over = doc("v: {B: 2, C: 2}\ns: [c]\nn: 1\n");
        let merged = deep_merge(base, over);
        let expected = doc("v: {A: 1, B: 2, C: 2}\ns: [c]\nk: 1\nn: 1\n");
        assert_eq!(
            serde_json::to_string(&merged.to_json()).unwrap(),
            serde_json::to_string(&expected.to_json()).unwrap()
        );
        let keys: Vec<_> = merged
            .as_map()
            .unwrap()
            .iter()
            .map(|(k, _)| k.name.as_str())
            .collect();
        assert_eq!(keys, ["v", "s", "k", "n"]);
        let vars: Vec<_> = merged
            .as_map()
            .unwrap()
            .get("v")
            .unwrap()
            .as_map()
            .unwrap()
            .iter()
            .map(|(k, _)| k.name.as_str())
            .collect();
        assert_eq!(vars, ["A", "B", "C"]);
    }

    #[test]
    fn positions_are_the_overriding_sides() {
        let base = doc("only:\n  refs: [main]\nx: 1\n");
        let over = doc("y: 2\nonly:\n  variables: [$A]\n");
        let merged = deep_merge(base, over);
        let (key, value) = merged.as_map().unwrap().entry("only").unwrap();
        assert_eq!((key.at.line, value.at.line), (2, 3), "the job's own only:");
        let refs = value.as_map().unwrap().entry("refs").unwrap().0;
        assert_eq!(
            refs.at.line, 2,
            "a key only the base has keeps its position"
        );
    }
}
