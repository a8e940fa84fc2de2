//! A Whitted-style raytracer of the SPD "balls" scene ([`crate::sphereflake`]): rays
//! from the eye through the centre of every pixel, Phong shading (diffuse and
//! specular) under each light that a shadow ray reaches, an ambient term, and mirror
//! reflection of the shiny spheres down to [`MAX_DEPTH`] bounces. No randomness, and
//! every pixel is computed by the same function from its coordinates alone, so an
//! image is the same bits however it is split up.
//!
//! The sequential version renders row by row ([`render_seq`]). The Satin job
//! ([`Render`]) halves its rectangle across its longer side and spawns both halves,
//! down to rectangles of at most `block x block` pixels that it renders itself; the
//! results are the rectangles' RGB bytes, put together by the spawners. The scene does
//! not travel with the jobs: every process builds the flake of the job's size once
//! ([`scene`]), it is generated, never read.
//!
//! Images are 8-bit RGB ([`Image`]); [`Image::write_png`] encodes them with the `png`
//! crate.

use crate::sphereflake::{self, Flake, Material};
use crate::vec3::V3;
use parking_lot::Mutex;
use satin::{Ctx, Job};
use serde::{Deserialize, Serialize};
use sha1::{Digest, Sha1};
use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::sync::{Arc, OnceLock};

/// Reflections followed per primary ray.
pub const MAX_DEPTH: u32 = 5;
/// The widest and the highest image.
pub const MAX_SIDE: u32 = 16384;
/// The most pixels an image may have (2^26: 192 MiB of RGB, held about three times
/// with `--check`).
pub const MAX_PIXELS: u64 = 1 << 26;
/// The default side of the blocks the Satin version renders without spawning.
pub const DEFAULT_BLOCK: u32 = 32;

/// The nearest distance along a ray that counts as a hit (so that a ray leaving a
/// surface does not hit that surface again).
const EPSILON: f64 = 1e-9;

/// A ray: an origin and a unit direction.
#[derive(Debug, Clone, Copy)]
pub struct Ray {
    /// Where it starts.
    pub origin: V3,
    /// Its direction (unit length).
    pub dir: V3,
}

/// The distances at which a ray's line enters and leaves a sphere, if it meets it.
fn sphere_span(ray: &Ray, center: V3, radius: f64) -> Option<(f64, f64)> {
    let oc = ray.origin - center;
    let b = oc.dot(ray.dir);
    let c = oc.dot(oc) - radius * radius;
    let disc = b * b - c;
    if disc < 0.0 {
        return None;
    }
    let s = disc.sqrt();
    Some((-b - s, -b + s))
}

/// The nearest distance in `(EPSILON, t_max)` at which `ray` hits the sphere, if any.
pub fn hit_sphere(ray: &Ray, center: V3, radius: f64, t_max: f64) -> Option<f64> {
    let (t0, t1) = sphere_span(ray, center, radius)?;
    if t0 > EPSILON && t0 < t_max {
        Some(t0)
    } else if t1 > EPSILON && t1 < t_max {
        Some(t1)
    } else {
        None
    }
}

/// What a ray hit first: where, the outward normal there, and the surface.
#[derive(Debug, Clone, Copy)]
struct Hit {
    t: f64,
    normal: V3,
    material: Material,
}

/// A scene: the flake and the floor under it.
#[derive(Debug)]
pub struct Scene {
    /// The sphereflake.
    pub flake: Flake,
}

impl Scene {
    /// The nearest hit of `ray` closer than `t_max` (`any`: the first one found, for
    /// shadow rays).
    fn intersect(&self, ray: &Ray, t_max: f64, any: bool) -> Option<Hit> {
        let mut best: Option<Hit> = None;
        let mut limit = t_max;
        // The floor.
        if ray.dir.z != 0.0 {
            let t = (sphereflake::FLOOR_Z - ray.origin.z) / ray.dir.z;
            if t > EPSILON && t < limit {
                let p = ray.origin + ray.dir * t;
                if p.x.abs() <= sphereflake::FLOOR_HALF && p.y.abs() <= sphereflake::FLOOR_HALF {
                    limit = t;
                    best = Some(Hit {
                        t,
                        normal: V3::new(0.0, 0.0, 1.0),
                        material: sphereflake::FLOOR_MATERIAL,
                    });
                    if any {
                        return best;
                    }
                }
            }
        }
        if let Some((t, i)) = self.nearest_sphere(ray, limit, any) {
            let n = &self.flake.nodes[i];
            let p = ray.origin + ray.dir * t;
            best = Some(Hit {
                t,
                normal: (p - n.center) * (1.0 / n.radius),
                material: sphereflake::SPHERE_MATERIAL,
            });
        }
        best
    }

    /// The nearest sphere of the flake that `ray` hits closer than `t_max` (`any`:
    /// the first one found): its distance and node, through the subtrees whose
    /// bounding spheres the ray crosses.
    fn nearest_sphere(&self, ray: &Ray, t_max: f64, any: bool) -> Option<(f64, usize)> {
        let nodes = &self.flake.nodes;
        let mut stack: Vec<u32> = Vec::with_capacity(64);
        stack.push(0);
        let mut limit = t_max;
        let mut best = None;
        while let Some(i) = stack.pop() {
            let n = &nodes[i as usize];
            match sphere_span(ray, n.center, n.bound) {
                Some((t0, t1)) if t1 > EPSILON && t0 < limit => {}
                _ => continue,
            }
            if let Some(t) = hit_sphere(ray, n.center, n.radius, limit) {
                limit = t;
                best = Some((t, i as usize));
                if any {
                    break;
                }
            }
            stack.extend(n.first_child..n.first_child + n.children);
        }
        best
    }

    /// The colour seen along `ray` after `depth` reflections.
    fn trace(&self, ray: &Ray, depth: u32) -> V3 {
        let Some(hit) = self.intersect(ray, f64::INFINITY, false) else {
            return sphereflake::BACKGROUND;
        };
        let m = hit.material;
        let p = ray.origin + ray.dir * hit.t;
        let mut n = hit.normal;
        if n.dot(ray.dir) > 0.0 {
            n = -n;
        }
        let view = -ray.dir;
        let intensity = 1.0 / (sphereflake::LIGHTS.len() as f64).sqrt();
        let mut color = m.color * m.ka;
        for light in sphereflake::LIGHTS {
            let to = light - p;
            let dist = to.length();
            let l = to * (1.0 / dist);
            let lambert = n.dot(l);
            if lambert <= 0.0 {
                continue;
            }
            let shadow = Ray { origin: p, dir: l };
            if self.intersect(&shadow, dist, true).is_some() {
                continue;
            }
            color = color + m.color * (m.kd * lambert * intensity);
            if m.ks > 0.0 {
                let r = (-l).reflect(n);
                let spec = r.dot(view);
                if spec > 0.0 {
                    color =
                        color + V3::new(1.0, 1.0, 1.0) * (m.ks * spec.powf(m.shine) * intensity);
                }
            }
        }
        if m.ks > 0.0 && depth < MAX_DEPTH {
            let reflected = Ray {
                origin: p,
                dir: ray.dir.reflect(n).normalized(),
            };
            color = color + self.trace(&reflected, depth + 1).times(m.color) * m.ks;
        }
        color
    }
}

/// The view: the eye and the image plane's axes, scaled to the field of view.
#[derive(Debug, Clone, Copy)]
pub struct Camera {
    eye: V3,
    forward: V3,
    right: V3,
    up: V3,
    width: u32,
    height: u32,
}

impl Camera {
    /// The SPD viewpoint for an image of `width x height` pixels (the field of view
    /// spans the shorter side).
    pub fn new(width: u32, height: u32) -> Camera {
        let forward = (sphereflake::LOOK_AT - sphereflake::EYE).normalized();
        let right = forward.cross(sphereflake::UP).normalized();
        let up = right.cross(forward);
        let half = (sphereflake::FIELD_OF_VIEW.to_radians() / 2.0).tan();
        let short = width.min(height).max(1) as f64;
        Camera {
            eye: sphereflake::EYE,
            forward,
            right: right * (half * width as f64 / short),
            up: up * (half * height as f64 / short),
            width,
            height,
        }
    }

    /// The ray through the centre of pixel `(x, y)` (`y = 0` the top row).
    pub fn ray(&self, x: u32, y: u32) -> Ray {
        let sx = 2.0 * (x as f64 + 0.5) / self.width as f64 - 1.0;
        let sy = 1.0 - 2.0 * (y as f64 + 0.5) / self.height as f64;
        Ray {
            origin: self.eye,
            dir: (self.forward + self.right * sx + self.up * sy).normalized(),
        }
    }
}

/// A channel in 0..=1 (clamped) as a byte.
fn byte(c: f64) -> u8 {
    (c.clamp(0.0, 1.0) * 255.0).round() as u8
}

/// The RGB bytes of pixel `(x, y)`.
pub fn pixel(scene: &Scene, camera: &Camera, x: u32, y: u32) -> [u8; 3] {
    let c = scene.trace(&camera.ray(x, y), 0);
    [byte(c.x), byte(c.y), byte(c.z)]
}

/// The RGB bytes of the rectangle `w x h` at `(x0, y0)`, row by row.
pub fn render_rect(scene: &Scene, camera: &Camera, x0: u32, y0: u32, w: u32, h: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(w as usize * h as usize * 3);
    for y in y0..y0 + h {
        for x in x0..x0 + w {
            out.extend_from_slice(&pixel(scene, camera, x, y));
        }
    }
    out
}

/// An 8-bit RGB image. Equal images have the same pixels; printed as its size and a
/// digest of its pixels.
#[derive(Clone, PartialEq, Eq)]
pub struct Image {
    /// The width in pixels.
    pub width: u32,
    /// The height in pixels.
    pub height: u32,
    /// Row by row, three bytes (red, green, blue) per pixel.
    pub rgb: Vec<u8>,
}

impl Image {
    /// The first 16 hex digits of the SHA-1 of the pixels.
    pub fn digest(&self) -> String {
        let d = Sha1::digest(&self.rgb);
        d[..8].iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Writes the image to `path` as a PNG file (8-bit RGB).
    pub fn write_png(&self, path: &Path) -> Result<(), String> {
        let at = |e: &dyn fmt::Display| format!("writing {}: {e}", path.display());
        let file = std::fs::File::create(path).map_err(|e| at(&e))?;
        let mut enc = png::Encoder::new(std::io::BufWriter::new(file), self.width, self.height);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut w = enc.write_header().map_err(|e| at(&e))?;
        w.write_image_data(&self.rgb).map_err(|e| at(&e))?;
        w.finish().map_err(|e| at(&e))
    }
}

/// `512x512, pixels 0123456789abcdef` (the SHA-1 of the pixels, first 8 bytes).
impl fmt::Debug for Image {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}x{}, pixels {}",
            self.width,
            self.height,
            self.digest()
        )
    }
}

/// What is wrong with an image's size, if anything: each side in `1..=MAX_SIDE`, at
/// most [`MAX_PIXELS`] in all.
pub fn check_dimensions(width: u32, height: u32) -> Result<(), String> {
    if !(1..=MAX_SIDE).contains(&width) || !(1..=MAX_SIDE).contains(&height) {
        return Err(format!(
            "an image of {width}x{height}: each side must be in 1..={MAX_SIDE}"
        ));
    }
    let pixels = width as u64 * height as u64;
    if pixels > MAX_PIXELS {
        return Err(format!(
            "an image of {width}x{height} has {pixels} pixels: at most {MAX_PIXELS} \
             ({} MiB of RGB)",
            (MAX_PIXELS * 3) >> 20
        ));
    }
    Ok(())
}

/// The scene of size `size` in this process, built on first use (`None` beyond
/// [`sphereflake::MAX_SIZE`]).
pub fn scene(size: u32) -> Option<Arc<Scene>> {
    static SCENES: OnceLock<Mutex<HashMap<u32, Arc<Scene>>>> = OnceLock::new();
    let mut scenes = SCENES.get_or_init(Default::default).lock();
    if let Some(s) = scenes.get(&size) {
        return Some(s.clone());
    }
    let s = Arc::new(Scene {
        flake: Flake::new(size)?,
    });
    scenes.insert(size, s.clone());
    Some(s)
}

/// The sequential version: the image rendered row by row.
pub fn render_seq(scene: &Scene, width: u32, height: u32) -> Image {
    let camera = Camera::new(width, height);
    Image {
        width,
        height,
        rgb: render_rect(scene, &camera, 0, 0, width, height),
    }
}

/// Renders a rectangle of the image: spawns its two halves while it is larger than
/// `block x block` pixels; returns its RGB bytes row by row (or an error if the size
/// or the rectangle is not one this process can render).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Render {
    /// The scene's size ([`scene`]).
    pub size: u32,
    /// The whole image's width.
    pub width: u32,
    /// The whole image's height.
    pub height: u32,
    /// The rectangle's left column.
    pub x: u32,
    /// The rectangle's top row.
    pub y: u32,
    /// The rectangle's width.
    pub w: u32,
    /// The rectangle's height.
    pub h: u32,
    /// The largest side of a rectangle rendered without spawning.
    pub block: u32,
}

impl Render {
    /// The root job: the whole image.
    pub fn root(size: u32, width: u32, height: u32, block: u32) -> Render {
        Render {
            size,
            width,
            height,
            x: 0,
            y: 0,
            w: width,
            h: height,
            block,
        }
    }

    /// Whether the rectangle lies in an image this process may render.
    fn valid(&self) -> Result<(), String> {
        check_dimensions(self.width, self.height)?;
        let inside = self.w >= 1
            && self.h >= 1
            && self.x as u64 + self.w as u64 <= self.width as u64
            && self.y as u64 + self.h as u64 <= self.height as u64;
        if inside && self.block >= 1 {
            Ok(())
        } else {
            Err(format!("a job outside its image: {self:?}"))
        }
    }
}

#[satin::job(name = "ibis_apps::raytrace::Render")]
impl Job for Render {
    type Output = Result<Vec<u8>, String>;

    fn run(self, ctx: &mut Ctx) -> Result<Vec<u8>, String> {
        self.valid()?;
        let Some(scene) = scene(self.size) else {
            return Err(format!(
                "size {} is beyond the largest scene ({})",
                self.size,
                sphereflake::MAX_SIZE
            ));
        };
        if self.w <= self.block && self.h <= self.block {
            let camera = Camera::new(self.width, self.height);
            return Ok(render_rect(&scene, &camera, self.x, self.y, self.w, self.h));
        }
        // Halve across the longer side.
        let (a, b) = if self.w >= self.h {
            let left = self.w / 2;
            (
                Render { w: left, ..self },
                Render {
                    x: self.x + left,
                    w: self.w - left,
                    ..self
                },
            )
        } else {
            let top = self.h / 2;
            (
                Render { h: top, ..self },
                Render {
                    y: self.y + top,
                    h: self.h - top,
                    ..self
                },
            )
        };
        let side_by_side = self.w >= self.h;
        let (aw, bw) = (a.w as usize * 3, b.w as usize * 3);
        let mut f = ctx.frame();
        let ta = f.spawn(a);
        let tb = f.spawn(b);
        let r = f.sync();
        let (pa, pb) = (r.get(ta)?, r.get(tb)?);
        if !side_by_side {
            let mut out = pa;
            out.extend_from_slice(&pb);
            return Ok(out);
        }
        // Row by row: a row of the left half, then the same row of the right half.
        let mut out = Vec::with_capacity(pa.len() + pb.len());
        for (ra, rb) in pa.chunks_exact(aw).zip(pb.chunks_exact(bw)) {
            out.extend_from_slice(ra);
            out.extend_from_slice(rb);
        }
        Ok(out)
    }
}

/// The Satin version: the image of the scene of size `size` rendered by [`Render`]
/// jobs.
pub fn render_satin(
    satin: &satin::Satin,
    size: u32,
    width: u32,
    height: u32,
    block: u32,
) -> Result<Image, String> {
    let rgb = satin.run(Render::root(size, width, height, block))?;
    Ok(Image { width, height, rgb })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ray(origin: V3, dir: V3) -> Ray {
        Ray {
            origin,
            dir: dir.normalized(),
        }
    }

    #[test]
    fn rays_hit_spheres_where_they_should() {
        let c = V3::new(0.0, 0.0, 5.0);
        // Head on: the near side at 4.
        let r = ray(V3::ZERO, V3::new(0.0, 0.0, 1.0));
        assert_eq!(hit_sphere(&r, c, 1.0, f64::INFINITY), Some(4.0));
        // Not before t_max.
        assert_eq!(hit_sphere(&r, c, 1.0, 3.5), None);
        // Inside: the far side.
        let inside = ray(c, V3::new(1.0, 0.0, 0.0));
        let t = hit_sphere(&inside, c, 1.0, f64::INFINITY).unwrap();
        assert!((t - 1.0).abs() < 1e-15);
        // Behind the ray, and beside it.
        let away = ray(V3::ZERO, V3::new(0.0, 0.0, -1.0));
        assert_eq!(hit_sphere(&away, c, 1.0, f64::INFINITY), None);
        let past = ray(V3::new(1.5, 0.0, 0.0), V3::new(0.0, 0.0, 1.0));
        assert_eq!(hit_sphere(&past, c, 1.0, f64::INFINITY), None);
        // Grazing at an offset of 0.6: enters at 5 - 0.8.
        let off = ray(V3::new(0.6, 0.0, 0.0), V3::new(0.0, 0.0, 1.0));
        let t = hit_sphere(&off, c, 1.0, f64::INFINITY).unwrap();
        assert!((t - 4.2).abs() < 1e-12, "{t}");
    }

    /// The nearest sphere of the flake by testing every sphere.
    fn nearest_by_brute_force(scene: &Scene, r: &Ray) -> Option<f64> {
        scene
            .flake
            .nodes
            .iter()
            .filter_map(|n| hit_sphere(r, n.center, n.radius, f64::INFINITY))
            .min_by(f64::total_cmp)
    }

    #[test]
    fn the_bounding_spheres_miss_no_sphere() {
        let scene = Scene {
            flake: Flake::new(3).unwrap(),
        };
        let camera = Camera::new(48, 48);
        let mut hits = 0;
        for y in 0..48 {
            for x in 0..48 {
                let r = camera.ray(x, y);
                let want = nearest_by_brute_force(&scene, &r);
                let got = scene.nearest_sphere(&r, f64::INFINITY, false).map(|h| h.0);
                assert_eq!(got, want, "pixel {x},{y}");
                hits += usize::from(want.is_some());
                // A shadow ray stops at the first sphere: one exists exactly when
                // the nearest does.
                let any = scene.nearest_sphere(&r, f64::INFINITY, true);
                assert_eq!(any.is_some(), want.is_some(), "pixel {x},{y}");
            }
        }
        assert!(hits > 200, "the flake is in view: {hits} pixels");
    }

    #[test]
    fn blocks_give_the_rows_image() {
        let scene = scene(2).unwrap();
        let want = render_seq(&scene, 37, 23);
        assert_eq!(want.rgb.len(), 37 * 23 * 3);
        // Not one colour: the flake, the floor and the sky are all in view.
        let mut colors: Vec<&[u8]> = want.rgb.chunks(3).collect();
        colors.sort_unstable();
        colors.dedup();
        assert!(colors.len() > 50, "{} colours", colors.len());
        let s = satin::Satin::builder().workers(2).build().unwrap();
        for block in [1, 5, 16, 64] {
            assert_eq!(
                render_satin(&s, 2, 37, 23, block).unwrap(),
                want,
                "block {block}"
            );
        }
    }

    #[test]
    fn png_round_trips() {
        let img = render_seq(&scene(1).unwrap(), 40, 30);
        let path = std::env::temp_dir().join(format!("raytrace-test-{}.png", std::process::id()));
        img.write_png(&path).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let mut reader = png::Decoder::new(std::io::BufReader::new(file))
            .read_info()
            .unwrap();
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).unwrap();
        let _ = std::fs::remove_file(&path);
        assert_eq!((info.width, info.height), (40, 30));
        assert_eq!(info.color_type, png::ColorType::Rgb);
        assert_eq!(info.bit_depth, png::BitDepth::Eight);
        assert_eq!(&buf[..info.buffer_size()], &img.rgb[..]);
    }

    #[test]
    fn bad_dimensions_and_jobs_are_errors() {
        assert!(check_dimensions(0, 10).is_err());
        assert!(check_dimensions(MAX_SIDE + 1, 1).is_err());
        assert!(check_dimensions(MAX_SIDE, MAX_SIDE).is_err(), "2^28 pixels");
        assert!(check_dimensions(8192, 8192).is_ok());
        let s = satin::Satin::builder().workers(1).build().unwrap();
        let mut job = Render::root(1, 10, 10, 4);
        job.x = 8;
        assert!(s.run(job).is_err(), "a rectangle beyond the image");
        assert!(s
            .run(Render::root(sphereflake::MAX_SIZE + 1, 4, 4, 4))
            .is_err());
    }
}
