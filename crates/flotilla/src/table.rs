//! Plain-text tables with aligned columns, for `exec --list`, the `exec` summary and `status`.

/// `head` and `rows` as lines of text, each line started with `indent`, cells padded to their
/// column's width and two spaces apart, trailing spaces trimmed.
pub(crate) fn render<R: AsRef<[String]>>(indent: &str, head: &[&str], rows: &[R]) -> String {
    let mut widths: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row.as_ref()) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let text = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ");
        out.push_str(indent);
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(head.to_vec());
    for row in rows {
        line(row.as_ref().iter().map(String::as_str).collect());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_and_lines_end_without_spaces() {
        let rows = [[
            "a-long-id".to_string(),
            "running".to_string(),
            String::new(),
        ]];
        assert_eq!(
            render("  ", &["ID", "STATE", "NOTE"], &rows),
            "  ID         STATE    NOTE\n  a-long-id  running\n"
        );
    }
}
