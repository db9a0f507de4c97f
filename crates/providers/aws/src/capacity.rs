//! How many instances an `increase` really asks the group for.

/// A `SetDesiredCapacity` to make: the new desired capacity and how many instances that
/// requests beyond the current one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Raise {
    /// The desired capacity to set.
    pub desired: i32,
    /// How many more instances that is (`0..=n`): what `increase` reports.
    pub requested: usize,
}

/// The desired capacity for `n` more instances than `current`, clamped to the group's
/// `max_size` (fleeting-plugin-aws: `SetDesiredCapacity(current + n)`; AWS refuses a desired
/// capacity above the maximum with a `ValidationError`, so asking for it would get nothing).
/// `None` when nothing can be requested: `n` is zero or the group is full.
pub fn raise(current: i32, max_size: i32, n: usize) -> Option<Raise> {
    let current = current.max(0);
    let room = max_size.saturating_sub(current).max(0);
    let n = i32::try_from(n).unwrap_or(i32::MAX);
    let requested = n.min(room);
    if requested <= 0 {
        return None;
    }
    Some(Raise {
        desired: current + requested,
        requested: requested as usize,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clamps_to_the_group_maximum() {
        assert_eq!(
            raise(2, 10, 3),
            Some(Raise {
                desired: 5,
                requested: 3
            })
        );
        assert_eq!(
            raise(8, 10, 5),
            Some(Raise {
                desired: 10,
                requested: 2
            })
        );
        assert_eq!(raise(10, 10, 1), None, "full");
        assert_eq!(raise(12, 10, 1), None, "over the maximum (lowered outside)");
        assert_eq!(raise(0, 10, 0), None, "nothing asked");
        assert_eq!(
            raise(0, 1000, usize::MAX),
            Some(Raise {
                desired: 1000,
                requested: 1000
            })
        );
        assert_eq!(
            raise(-1, 3, 2),
            Some(Raise {
                desired: 2,
                requested: 2
            }),
            "a nonsense current counts as zero"
        );
    }
}
