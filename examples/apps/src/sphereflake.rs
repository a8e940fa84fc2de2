//! The "balls" scene of Eric Haines' Standard Procedural Databases (SPD), the
//! sphereflake: a sphere of radius 0.5 at the origin that carries 9 spheres of a third
//! of its radius on its surface, each of which carries 9 more, down to the chosen size
//! (level); a square floor under it, three lights and the SPD's viewpoint.
//!
//! A sphere's children touch it: six around its equator, 60 degrees apart, and three
//! on its upper hemisphere (54.7 degrees above the equator, between the equator's),
//! "up" being the direction from its parent (the root's is +z); the SPD's placement.
//! The bottom hemisphere is where it sits on its parent, so it carries nothing. Size
//! `n` has
//! `1 + 9 + ... + 9^n` spheres ([`sphere_count`]): 7381 at size 4.
//!
//! The spheres are stored as a tree, each node with the radius of a sphere around its
//! whole subtree (at most twice its own radius), so that a ray visits only the
//! subtrees whose bounding sphere it crosses.

use crate::vec3::V3;

/// The largest size: 5,380,840 spheres at size 7 (some 260 MB in every process);
/// size 8 would need 2.3 GB.
pub const MAX_SIZE: u32 = 7;

/// The SPD viewpoint: the eye, the point looked at, the up direction and the full
/// field of view in degrees.
pub const EYE: V3 = V3::new(2.1, 1.3, 1.7);
/// The point the eye looks at.
pub const LOOK_AT: V3 = V3::new(0.0, 0.0, 0.0);
/// The up direction of the view.
pub const UP: V3 = V3::new(0.0, 0.0, 1.0);
/// The field of view (degrees) of the shorter side of the image.
pub const FIELD_OF_VIEW: f64 = 45.0;
/// The background's colour (the SPD's sky blue).
pub const BACKGROUND: V3 = V3::new(0.078, 0.361, 0.753);
/// The SPD's three point lights, of equal intensity.
pub const LIGHTS: [V3; 3] = [
    V3::new(4.0, 3.0, 2.0),
    V3::new(1.0, -4.0, 4.0),
    V3::new(-3.0, 1.0, 5.0),
];
/// The floor: the square `|x|, |y| <= FLOOR_HALF` at `z = FLOOR_Z`, under the root.
pub const FLOOR_Z: f64 = -0.5;
/// Half the side of the floor square.
pub const FLOOR_HALF: f64 = 12.0;

/// A surface: its colour and Phong coefficients (ambient, diffuse, specular, the
/// specular exponent); the specular coefficient is also the reflectance.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Material {
    /// The colour, each channel in 0..=1.
    pub color: V3,
    /// The ambient coefficient.
    pub ka: f64,
    /// The diffuse coefficient.
    pub kd: f64,
    /// The specular coefficient (and the reflectance).
    pub ks: f64,
    /// The specular exponent.
    pub shine: f64,
}

/// The spheres' surface (the SPD's: a mirrored cream).
pub const SPHERE_MATERIAL: Material = Material {
    color: V3::new(1.0, 0.9, 0.7),
    ka: 0.0,
    kd: 0.5,
    ks: 0.5,
    shine: 37.0,
};

/// The floor's surface (the SPD's matte beige).
pub const FLOOR_MATERIAL: Material = Material {
    color: V3::new(1.0, 0.75, 0.33),
    ka: 0.2,
    kd: 0.8,
    ks: 0.0,
    shine: 0.0,
};

/// One sphere of the flake and its subtree.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Node {
    /// The centre.
    pub center: V3,
    /// The radius.
    pub radius: f64,
    /// The radius of a sphere around `center` holding the whole subtree.
    pub bound: f64,
    /// The index of the first child in [`Flake::nodes`] (the children are
    /// consecutive).
    pub first_child: u32,
    /// The number of children (0 or 9).
    pub children: u32,
}

/// The sphereflake of one size: its nodes, the root first.
#[derive(Debug, Clone, PartialEq)]
pub struct Flake {
    /// The size (levels below the root).
    pub size: u32,
    /// The spheres; node 0 is the root.
    pub nodes: Vec<Node>,
}

/// The number of spheres of size `size`: `1 + 9 + ... + 9^size` (`None` if it does
/// not fit a `u64`).
pub fn sphere_count(size: u32) -> Option<u64> {
    let mut total: u64 = 0;
    let mut level: u64 = 1;
    for _ in 0..=size {
        total = total.checked_add(level)?;
        level = level.checked_mul(9)?;
    }
    Some(total)
}

/// `v` turned by the rotation that takes +z to the unit vector `d` (about the axis
/// perpendicular to both; a half turn about y if `d` is -z).
fn rotate_from_z(v: V3, d: V3) -> V3 {
    if d.z >= 1.0 {
        return v;
    }
    if d.z <= -1.0 {
        return V3::new(-v.x, v.y, -v.z);
    }
    let axis = V3::new(0.0, 0.0, 1.0).cross(d).normalized();
    let (sin, cos) = (1.0 - d.z * d.z).sqrt().min(1.0).atan2(d.z).sin_cos();
    // Rodrigues' formula.
    v * cos + axis.cross(v) * sin + axis * (axis.dot(v) * (1.0 - cos))
}

/// The directions of a sphere's 9 children when its "up" is `axis` (unit): in the
/// frame where up is +z, six on the equator at azimuths 15, 75, ..., 315 degrees and
/// three at the elevation asin(2 / sqrt 6) (54.7 degrees) at azimuths 45, 165 and 285
/// (the SPD's set: a tilted trio turned by thirds of a turn), turned by the rotation
/// that takes +z to `axis`.
fn child_directions(axis: V3) -> [V3; 9] {
    let top = (2.0 / 6.0f64.sqrt()).asin();
    let mut dirs = [V3::ZERO; 9];
    for (k, d) in dirs.iter_mut().enumerate() {
        let (azimuth, elevation) = if k < 6 {
            ((15.0 + 60.0 * k as f64).to_radians(), 0.0)
        } else {
            ((45.0 + 120.0 * (k - 6) as f64).to_radians(), top)
        };
        let (sa, ca) = azimuth.sin_cos();
        let (se, ce) = f64::sin_cos(elevation);
        *d = rotate_from_z(V3::new(ca * ce, sa * ce, se), axis).normalized();
    }
    dirs
}

impl Flake {
    /// The flake of size `size` (at most [`MAX_SIZE`]: `None` beyond).
    pub fn new(size: u32) -> Option<Flake> {
        if size > MAX_SIZE {
            return None;
        }
        let count = sphere_count(size)? as usize;
        let mut nodes = Vec::with_capacity(count);
        nodes.push(Node {
            center: V3::ZERO,
            radius: 0.5,
            bound: 0.5,
            first_child: 0,
            children: 0,
        });
        // Breadth first: the children of each node are consecutive; `axes[i]` is
        // node i's "up".
        let mut axes = vec![UP];
        let mut level_start = 0;
        for _ in 0..size {
            let level_end = nodes.len();
            for i in level_start..level_end {
                let parent = nodes[i];
                nodes[i].first_child = nodes.len() as u32;
                nodes[i].children = 9;
                let r = parent.radius / 3.0;
                for d in child_directions(axes[i]) {
                    nodes.push(Node {
                        center: parent.center + d * (parent.radius + r),
                        radius: r,
                        bound: r,
                        first_child: 0,
                        children: 0,
                    });
                    axes.push(d);
                }
            }
            level_start = level_end;
        }
        // Bounds from the leaves up (children come after their parents).
        for i in (0..nodes.len()).rev() {
            let n = nodes[i];
            let mut bound = n.radius;
            for c in n.first_child..n.first_child + n.children {
                let c = nodes[c as usize];
                bound = bound.max((c.center - n.center).length() + c.bound);
            }
            nodes[i].bound = bound;
        }
        Some(Flake { size, nodes })
    }

    /// The children of node `i`.
    pub fn children(&self, i: usize) -> &[Node] {
        let n = &self.nodes[i];
        &self.nodes[n.first_child as usize..(n.first_child + n.children) as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sphere_counts_per_level() {
        // The SPD's table: 10, 91, 820, 7381 spheres at sizes 1 to 4.
        for (size, want) in [(0, 1), (1, 10), (2, 91), (3, 820), (4, 7381)] {
            assert_eq!(sphere_count(size), Some(want));
            let f = Flake::new(size).unwrap();
            assert_eq!(f.nodes.len() as u64, want, "size {size}");
            let leaves = f.nodes.iter().filter(|n| n.children == 0).count();
            assert_eq!(leaves as u64, 9u64.pow(size), "size {size}");
        }
        for size in 0..=MAX_SIZE {
            assert_eq!(sphere_count(size), Some((9u64.pow(size + 1) - 1) / 8));
        }
        assert_eq!(sphere_count(MAX_SIZE), Some(5_380_840));
        assert!(Flake::new(MAX_SIZE + 1).is_none());
        assert_eq!(sphere_count(40), None);
    }

    #[test]
    fn children_touch_their_parent_and_not_each_other() {
        let f = Flake::new(2).unwrap();
        for i in 0..f.nodes.len() {
            let p = f.nodes[i];
            let kids = f.children(i);
            for (a, c) in kids.iter().enumerate() {
                assert!((c.radius - p.radius / 3.0).abs() < 1e-15);
                let d = (c.center - p.center).length();
                assert!((d - (p.radius + c.radius)).abs() < 1e-12, "touching: {d}");
                // Not below the parent's equator: that is where the parent sits.
                let up = if i == 0 {
                    UP
                } else {
                    let grand = (0..i).find(|&g| f.children(g).contains(&p)).unwrap();
                    (p.center - f.nodes[grand].center).normalized()
                };
                let elevation = ((c.center - p.center).normalized().dot(up)).asin();
                assert!(elevation > -1e-12, "a child below the equator: {elevation}");
                for o in &kids[a + 1..] {
                    let gap = (o.center - c.center).length() - 2.0 * c.radius;
                    assert!(gap > 0.0, "siblings overlap by {gap}");
                }
            }
        }
    }

    #[test]
    fn the_rotation_takes_z_to_the_axis() {
        let z = V3::new(0.0, 0.0, 1.0);
        for d in [
            V3::new(1.0, 2.0, 3.0),
            V3::new(-1.0, 0.5, -2.0),
            V3::new(0.0, 1.0, 0.0),
            V3::new(0.0, 0.0, -1.0),
            z,
        ] {
            let d = d.normalized();
            assert!((rotate_from_z(z, d) - d).length() < 1e-12, "{d:?}");
            let v = V3::new(0.3, -0.7, 0.2);
            let r = rotate_from_z(v, d);
            assert!(
                (r.length() - v.length()).abs() < 1e-12,
                "a rotation keeps lengths"
            );
            assert!(
                (r.dot(d) - v.dot(z)).abs() < 1e-12,
                "and angles to the axis"
            );
        }
    }

    #[test]
    fn bounds_hold_every_descendant() {
        let f = Flake::new(3).unwrap();
        fn check(f: &Flake, i: usize, outer: &Node) {
            let n = f.nodes[i];
            let reach = (n.center - outer.center).length() + n.radius;
            assert!(reach <= outer.bound + 1e-12, "{reach} > {}", outer.bound);
            for c in n.first_child..n.first_child + n.children {
                check(f, c as usize, outer);
            }
        }
        for i in 0..f.nodes.len() {
            let n = f.nodes[i];
            assert!(
                n.bound <= 2.0 * n.radius + 1e-12,
                "a flake fits twice its radius"
            );
            check(&f, i, &n);
        }
    }
}
