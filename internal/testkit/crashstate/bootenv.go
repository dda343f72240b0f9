package crashstate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"

	"github.com/otad/otad/bootctl"
	"github.com/otad/otad/bootctl/grub"
	"github.com/otad/otad/bootctl/uboot"
	"github.com/otad/otad/ota"
)

// Attempts is the boot attempts each scenario's bootloader is set up with.
const Attempts = 3

// Boot is a bootloader and the format of its environment.
type Boot int

const (
	UBootSingle    Boot = iota // one U-Boot env copy
	UBootRedundant             // two copies, flags byte (the copy not in use is written)
	GRUB                       // a grubenv block, edited in place
)

func (b Boot) String() string {
	return [...]string{"uboot-single", "uboot-redundant", "grub"}[b]
}

// Boots are the bootloaders a whole update is explored on.
func Boots() []Boot { return []Boot{UBootSingle, UBootRedundant, GRUB} }

const ubootEnvSize = 0x2000

// Tries is how often the bootloader tries a new slot before it falls back.
func (b Boot) Tries() int {
	if b == GRUB {
		return 1
	}
	return Attempts
}

// factory writes the environment of a device as it leaves the factory,
// running slot A, and the files that say where it is.
func (b Boot) factory(root string) error {
	for _, d := range []string{"boot", "etc"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o700); err != nil {
			return err
		}
	}
	if b == GRUB {
		buf, err := grub.EncodeEnv(map[string]string{grub.OrderVar: "A B", "A_OK": "1", "A_TRY": "0", "B_OK": "0", "B_TRY": "0"})
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(root, "boot", "grubenv"), buf, 0o600)
	}
	env := filepath.Join(root, "boot", "uboot.env")
	conf := fmt.Sprintf("%s 0x0 0x%x\n", env, ubootEnvSize)
	var img []byte
	vars := factoryUBoot()
	c0, err := uboot.EncodeEnv(vars, ubootEnvSize, b == UBootRedundant, 1)
	if err != nil {
		return err
	}
	img = c0
	if b == UBootRedundant {
		conf += fmt.Sprintf("%s 0x%x 0x%x\n", env, ubootEnvSize, ubootEnvSize)
		c1, err := uboot.EncodeEnv(vars, ubootEnvSize, true, 0)
		if err != nil {
			return err
		}
		img = append(img, c1...)
	}
	if err := os.WriteFile(env, img, 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(root, "etc", "fw_env.config"), []byte(conf), 0o600)
}

// factoryUBoot is the saved environment at the factory: the board's own
// variables and otad's.
func factoryUBoot() map[string]string {
	return map[string]string{"bootcmd": "run otad_boot", "bootdelay": "2",
		uboot.OrderVar: "A B", uboot.LeftVar(ota.SlotA): uboot.Counter(Attempts), uboot.LeftVar(ota.SlotB): uboot.Counter(Attempts)}
}

// defaultUBoot is U-Boot's built-in environment, used when no saved copy
// passes its CRC: no otad variables (docs/porting-uboot.md).
func defaultUBoot() map[string]string {
	return map[string]string{"bootcmd": "run otad_boot", "bootdelay": "2"}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// open is the backend otad uses on the environment under root.
func (b Boot) open(root string, d bootctl.Disk) (bootctl.Bootloader, error) {
	if b == GRUB {
		e, err := grub.Open(filepath.Join(root, "boot", "grubenv"), Attempts, discard())
		if err != nil {
			return nil, err
		}
		return e.WithDisk(d), nil
	}
	e, err := uboot.Open(filepath.Join(root, "etc", "fw_env.config"), Attempts, discard())
	if err != nil {
		return nil, err
	}
	return e.WithDisk(d).WithLockFile(""), nil
}

var errNoSlot = errors.New("no slot to boot")

// powerOn runs the bootloader: its rules pick a slot (uboot.Pick, grub.Pick,
// the shipped scripts' logic) over the environment as stored, and it saves
// the environment as the script does. mark is told the pick before the save
// (a power cut may tear it); defaultEnv says the saved environment was
// unreadable and the built-in one was used.
func (b Boot) powerOn(root string, d bootctl.Disk, mark func(ota.Slot, bool)) (ota.Slot, error) {
	ctx := context.Background()
	if b == GRUB {
		return b.powerOnGRUB(ctx, root, d, mark)
	}
	bl, err := b.open(root, d)
	if err != nil {
		return "", err
	}
	e := bl.(*uboot.Env)
	var slot ota.Slot
	err = e.Update(ctx, func(v map[string]string) error {
		s, nv := uboot.Pick(v, Attempts)
		if s == "" {
			return errNoSlot
		}
		slot = s
		mark(s, false)
		clear(v)
		maps.Copy(v, nv)
		return nil
	})
	if !errors.Is(err, bootctl.ErrBadEnv) {
		return slot, err
	}
	// "bad CRC, using default environment": the script's defaults boot, and
	// its saveenv writes a valid copy again.
	s, nv := uboot.Pick(defaultUBoot(), Attempts)
	mark(s, true)
	copies, err := uboot.LoadConfig(filepath.Join(root, "etc", "fw_env.config"))
	if err != nil {
		return "", err
	}
	buf, err := uboot.EncodeEnv(nv, ubootEnvSize, b == UBootRedundant, 1)
	if err != nil {
		return "", err
	}
	f, err := os.OpenFile(copies[0].Path, os.O_RDWR, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if _, err := d.WriteAt(f, buf, copies[0].Offset); err != nil {
		return "", err
	}
	return s, d.Sync(f)
}

func (b Boot) powerOnGRUB(ctx context.Context, root string, d bootctl.Disk, mark func(ota.Slot, bool)) (ota.Slot, error) {
	bl, err := b.open(root, d)
	if err != nil {
		// load_env fails: grub.cfg runs on its defaults (slot A), and
		// save_env cannot write the block either.
		s, _ := grub.Pick(nil)
		mark(s, true)
		return s, nil
	}
	e := bl.(*grub.Env)
	snap, err := e.Load(ctx)
	if err != nil {
		return "", err
	}
	s, nv := grub.Pick(snap.Vars)
	if s == "" {
		return "", errNoSlot
	}
	mark(s, false)
	return s, e.Update(ctx, nv)
}

// primary is the slot the next boot picks, as the environment says now; ""
// when it cannot be read.
func (b Boot) primary(root string) ota.Slot {
	bl, err := b.open(root, bootctl.OSDisk())
	if err != nil {
		return ""
	}
	st, err := bl.State(context.Background())
	if err != nil {
		return ""
	}
	return st.Primary()
}
