//! Where the sweep plot writes each point's label (pure, in pixels): beside its point, inside
//! the plotting area, moved past the labels placed before it. Points of a sweep often lie
//! close together (two values that cost the same), and labels written at their points then
//! run into each other. Only where the area has no room left (labels pushed to its bottom
//! edge) may two still meet.

/// A label's place: its top-left corner, in pixels.
pub(super) type Place = (i32, i32);

/// The plotting area, in pixels: `x` and `y` ranges (`y` grows downwards).
#[derive(Debug, Clone, Copy)]
pub(super) struct Area {
    pub(super) left: i32,
    pub(super) right: i32,
    pub(super) top: i32,
    pub(super) bottom: i32,
}

/// Room between a point and its label, and between two labels.
const GAP: i32 = 4;

/// Places labels of `sizes` (width, height) at `points`, in order: each goes up and to the
/// right of its point (to the left where it would run past the right edge), then moves up
/// past every label placed before it that it would cover, and down below its point when that
/// leaves the area's top.
pub(super) fn place(points: &[(i32, i32)], sizes: &[(u32, u32)], area: Area) -> Vec<Place> {
    let mut placed: Vec<(Place, (i32, i32))> = Vec::new();
    for (&(px, py), &(w, h)) in points.iter().zip(sizes) {
        let (w, h) = (to_i32(w), to_i32(h));
        let mut x = px + GAP;
        if x + w > area.right {
            x = (px - GAP - w).max(area.left);
        }
        let mut y = py - GAP - h;
        // Up past each label it covers, as often as that finds another.
        while let Some(&((_, oy), _)) = placed
            .iter()
            .find(|&&((ox, oy), (ow, oh))| overlaps((x, y, w, h), (ox, oy, ow, oh)))
        {
            y = oy - GAP - h;
        }
        if y < area.top {
            // No room above: below the point, and down past what it covers there.
            y = py + GAP;
            while let Some(&((_, oy), (_, oh))) = placed
                .iter()
                .find(|&&((ox, oy), (ow, oh))| overlaps((x, y, w, h), (ox, oy, ow, oh)))
            {
                y = oy + oh + GAP;
            }
            y = y.min(area.bottom - h);
        }
        placed.push(((x, y), (w, h)));
    }
    placed.into_iter().map(|(p, _)| p).collect()
}

/// Whether two boxes (`x`, `y`, width, height) share a pixel.
fn overlaps(a: (i32, i32, i32, i32), b: (i32, i32, i32, i32)) -> bool {
    a.0 < b.0 + b.2 && b.0 < a.0 + a.2 && a.1 < b.1 + b.3 && b.1 < a.1 + a.3
}

fn to_i32(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const AREA: Area = Area {
        left: 80,
        right: 870,
        top: 50,
        bottom: 500,
    };

    fn boxes(points: &[(i32, i32)], sizes: &[(u32, u32)]) -> Vec<(i32, i32, i32, i32)> {
        place(points, sizes, AREA)
            .into_iter()
            .zip(sizes)
            .map(|((x, y), &(w, h))| (x, y, to_i32(w), to_i32(h)))
            .collect()
    }

    #[test]
    fn labels_of_points_close_together_do_not_cover_each_other() {
        // The sweep of docs/simulate-sweep.png: max_instances=20 and =30 cost about the same
        // and wait about as little, so their labels were written over each other.
        let points = [(160, 118), (375, 415), (731, 492), (795, 491)];
        let sizes = [(110, 15); 4];
        let b = boxes(&points, &sizes);
        for (i, a) in b.iter().enumerate() {
            for c in &b[i + 1..] {
                assert!(!overlaps(*a, *c), "{a:?} covers {c:?}");
            }
            assert!(a.0 >= AREA.left && a.0 + a.2 <= AREA.right, "{a:?}");
            assert!(a.1 >= AREA.top && a.1 + a.3 <= AREA.bottom, "{a:?}");
        }
    }

    #[test]
    fn a_label_stays_beside_its_point() {
        // Alone, a label is just above its point, to its right (left near the right edge).
        let b = boxes(&[(300, 300), (860, 300)], &[(100, 15), (100, 15)]);
        assert_eq!(b[0], (304, 281, 100, 15));
        assert_eq!(b[1], (756, 281, 100, 15));
        // At the top, it goes below.
        let b = boxes(&[(300, 55)], &[(100, 15)]);
        assert_eq!(b[0], (304, 59, 100, 15));
    }

    #[test]
    fn many_labels_at_one_point_stack() {
        let points = [(400, 400); 6];
        let sizes = [(90, 14); 6];
        let b = boxes(&points, &sizes);
        for (i, a) in b.iter().enumerate() {
            for c in &b[i + 1..] {
                assert!(!overlaps(*a, *c), "{a:?} covers {c:?}");
            }
        }
    }
}
