package demo

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// rollout builds, signs and publishes one image, then follows the fleet
// until every device has an outcome.
func (d *run) rollout(ctx context.Context, r rolloutSpec) error {
	img := filepath.Join(d.dir, "images", "rootfs-"+r.version+".img")
	if err := os.MkdirAll(filepath.Dir(img), 0o755); err != nil {
		return fmt.Errorf("images: %w", err)
	}
	spec := ImageSpec{Broken: r.broken, Version: r.version, Seed: r.secVer, Size: d.opt.ImageSize}
	payload := filepath.Join(d.www, filepath.Base(img)+".zst")
	envFile := filepath.Join(d.dir, "rollout-"+r.version+".json")
	id := "demo-" + r.version
	args := []string{"sign", "--key", d.key, "--image", img, "--version", r.version, "--id", id,
		"--compatible", compatible, "--security-version", fmt.Sprint(r.secVer)}
	if r.from == "" {
		if _, err := WriteImageFile(img, spec); err != nil {
			return err
		}
		d.say("built %s (%s)", d.rel(img), humanSize(d.opt.ImageSize))
		args = append(args, "--compress", "zstd", "--out-payload", payload, "--url", d.files.URL+"/"+filepath.Base(payload))
		d.say("signing it; the payload is compressed with zstd")
	} else {
		base := filepath.Join(filepath.Dir(img), "rootfs-"+r.from+".img")
		_, changed, err := WriteVariantFile(img, base, spec, chunkSize)
		if err != nil {
			return err
		}
		d.say("built %s (%s): %s with %d of its %s chunks changed", d.rel(img), humanSize(d.opt.ImageSize), r.from, changed, humanSize(chunkSize))
		payload = strings.TrimSuffix(payload, ".img.zst")
		args = append(args, "--chunked", "--out-payload", payload, "--url", d.files.URL+"/"+filepath.Base(payload))
		d.say("signing it as a chunked payload: the devices fetch only the chunks they do not hold")
	}
	env, _, err := d.otactl(ctx, args, envFile)
	if err != nil {
		return err
	}
	if err := os.WriteFile(envFile, env, 0o644); err != nil {
		return fmt.Errorf("envelope: %w", err)
	}
	if r.from != "" {
		payload += ".store"
	}
	if st, err := os.Stat(payload); err == nil {
		d.say("    payload %s: %s for %s of image, envelope %s: %d bytes",
			d.rel(payload), humanSize(st.Size()), humanSize(d.opt.ImageSize), d.rel(envFile), len(env))
	}

	if r.canary != "" {
		return d.staged(ctx, r, envFile, id)
	}
	d.say("publishing rollout %s to group %q", r.version, group)
	args = []string{"publish", "--broker", d.broker.URL, "--group", group, envFile}
	d.fleet.Begin(id)
	out, errOut, err := d.otactl(ctx, args, "")
	if err != nil {
		return err
	}
	d.indent(append(out, errOut...))
	d.say("following the fleet until every device has an outcome (expected: %s)", r.want)
	return d.live(ctx, "rollout "+r.version, func() (bool, error) {
		v := d.fleet.Check(d.ids, r.want)
		if len(v.Wrong) > 0 {
			return false, fmt.Errorf("rollout %s did not go as expected:\n  %s", r.version, strings.Join(v.Wrong, "\n  "))
		}
		return v.Done(), nil
	})
}
