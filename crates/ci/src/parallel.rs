//! `parallel`: a count (`rspec 1/3` ... `rspec 3/3`) or a matrix (`build: [aws, monitoring]`, one
//! job per combination of each matrix entry's values, entries in order, the first variable
//! varying slowest). Every instance gets `CI_NODE_INDEX` and `CI_NODE_TOTAL`; matrix instances
//! also get their variables.

use super::job::ParallelInstance;
use super::reader::Reader;
use super::yaml::{Node, Value};

/// GitLab's limit on instances of one job.
const MAX_INSTANCES: usize = 200;

/// A job's `parallel:` as written.
#[derive(Clone, Debug)]
pub(crate) enum ParallelSpec {
    /// `parallel: N`.
    Count(usize),
    /// `parallel: matrix`: the combinations, in order.
    Matrix(Vec<Vec<(String, String)>>),
}

/// Read `parallel:`.
pub(crate) fn read_parallel(reader: &mut Reader<'_>, node: &Node) -> Option<ParallelSpec> {
    match &node.value {
        Value::Int(n) => {
            if !(1..=MAX_INSTANCES as i64).contains(n) {
                reader.fail(
                    &node.at,
                    format!("parallel should be between 1 and {MAX_INSTANCES}, found {n}"),
                );
                return None;
            }
            usize::try_from(*n).ok().map(ParallelSpec::Count)
        }
        Value::Map(map) => {
            let mut r = reader.nested("parallel");
            if !r.check_keys(map, &["matrix"]) {
                return None;
            }
            let Some(matrix) = map.get("matrix") else {
                r.fail(&node.at, "should have matrix");
                return None;
            };
            let combinations = read_matrix(&mut r, matrix)?;
            if combinations.len() > MAX_INSTANCES {
                r.fail(
                    &matrix.at,
                    format!(
                        "matrix generates {} jobs; GitLab's limit is {MAX_INSTANCES}",
                        combinations.len()
                    ),
                );
                return None;
            }
            Some(ParallelSpec::Matrix(combinations))
        }
        _ => {
            reader.wrong(node, "parallel", "an integer or a hash with matrix");
            None
        }
    }
}

/// Read a `matrix:` array of hashes into its combinations.
pub(crate) fn read_matrix(
    reader: &mut Reader<'_>,
    node: &Node,
) -> Option<Vec<Vec<(String, String)>>> {
    let Some(entries) = node.as_seq() else {
        reader.wrong(node, "matrix", "an array of hashes");
        return None;
    };
    let mut combinations = Vec::new();
    for entry in entries {
        let Some(map) = entry.as_map() else {
            reader.wrong(entry, "matrix", "an array of hashes");
            return None;
        };
        if map.is_empty() {
            reader.fail(&entry.at, "matrix entries should not be empty");
            return None;
        }
        let mut axes: Vec<(String, Vec<String>)> = Vec::new();
        for (key, value) in map.iter() {
            let values = match &value.value {
                Value::Seq(items) => {
                    let values: Option<Vec<String>> = items.iter().map(Node::scalar_text).collect();
                    match values {
                        Some(v) if !v.is_empty() => v,
                        _ => {
                            reader.wrong(
                                value,
                                &format!("matrix:{}", key.name),
                                "a string or an array of strings",
                            );
                            return None;
                        }
                    }
                }
                _ => match value.scalar_text() {
                    Some(v) => vec![v],
                    None => {
                        reader.wrong(
                            value,
                            &format!("matrix:{}", key.name),
                            "a string or an array of strings",
                        );
                        return None;
                    }
                },
            };
            axes.push((key.name.clone(), values));
        }
        combinations.extend(product(&axes));
    }
    Some(combinations)
}

/// Every combination of the axes' values, the first axis varying slowest.
fn product(axes: &[(String, Vec<String>)]) -> Vec<Vec<(String, String)>> {
    let mut out: Vec<Vec<(String, String)>> = vec![Vec::new()];
    for (key, values) in axes {
        let mut next = Vec::with_capacity(out.len() * values.len());
        for prefix in &out {
            for value in values {
                let mut combination = prefix.clone();
                combination.push((key.clone(), value.clone()));
                next.push(combination);
            }
        }
        out = next;
    }
    out
}

/// The name GitLab gives a matrix instance: `base: [v1, v2]`.
pub(crate) fn matrix_name(base: &str, combination: &[(String, String)]) -> String {
    let values: Vec<&str> = combination.iter().map(|(_, v)| v.as_str()).collect();
    format!("{base}: [{}]", values.join(", "))
}

/// The instances of a job: names and what each instance is.
pub(crate) fn instances(base: &str, spec: &ParallelSpec) -> Vec<(String, ParallelInstance)> {
    match spec {
        ParallelSpec::Count(total) => (1..=*total)
            .map(|index| {
                (
                    format!("{base} {index}/{total}"),
                    ParallelInstance {
                        index,
                        total: *total,
                        matrix: Vec::new(),
                    },
                )
            })
            .collect(),
        ParallelSpec::Matrix(combinations) => combinations
            .iter()
            .enumerate()
            .map(|(i, combination)| {
                (
                    matrix_name(base, combination),
                    ParallelInstance {
                        index: i + 1,
                        total: combinations.len(),
                        matrix: combination.clone(),
                    },
                )
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn product_order_matches_gitlab() {
        let axes = vec![
            ("PROVIDER".to_string(), vec!["aws".to_string()]),
            (
                "STACK".to_string(),
                vec!["monitoring".to_string(), "app1".to_string()],
            ),
        ];
        let names: Vec<String> = product(&axes)
            .iter()
            .map(|c| matrix_name("build", c))
            .collect();
        assert_eq!(names, ["build: [aws, monitoring]", "build: [aws, app1]"]);
    }

    #[test]
    fn count_names() {
        let names: Vec<String> = instances("rspec", &ParallelSpec::Count(3))
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(names, ["rspec 1/3", "rspec 2/3", "rspec 3/3"]);
    }
}
