################################################################################
#
# otad
#
################################################################################

OTAD_VERSION = d4fcd5d9ea5fa83d6eabc4fec141285e9c0ee0b9
OTAD_SITE = $(call github,otad,otad,$(OTAD_VERSION))
# The project has not published a license yet: its copyright file says so.
OTAD_LICENSE = PROPRIETARY
OTAD_LICENSE_FILES = packaging/debian/copyright
OTAD_REDISTRIBUTE = NO
OTAD_GOMOD = github.com/otad/otad
OTAD_BUILD_TARGETS = cmd/otad
OTAD_LDFLAGS = -X main.version=$$(cat $(@D)/otad-version)

# The version otad prints (docs/contract/packaging.md): the VERSION file's
# and the commit's, as packaging/version gives it for a build of one commit
# (0.1.0~dev+gd4fcd5d9ea5f; the tarball has no history, so no commit
# count), or, with OTAD_OVERRIDE_SRCDIR, the checkout's (as make gives it
# there; OTAD_VERSION is then "custom"). Run on the build host before the
# build; OTAD_LDFLAGS and the completions' hook read it.
define OTAD_MAKE_VERSION
	cd $(@D) && $(HOST_GO_HOST_ENV) $(GO_BIN) run ./packaging/version \
		$(if $(OTAD_OVERRIDE_SRCDIR),-root $(OTAD_OVERRIDE_SRCDIR),-commit $(OTAD_VERSION)) \
		>$(@D)/otad-version
endef
OTAD_PRE_BUILD_HOOKS += OTAD_MAKE_VERSION

# The completions come from the command tables, as `make deb` makes them
# (packaging/gendocs, built for and run on the build host).
define OTAD_BUILD_COMPLETIONS
	cd $(@D) && $(HOST_GO_HOST_ENV) $(GO_BIN) run \
		./packaging/gendocs -out $(@D)/bin/docs -version $$(cat $(@D)/otad-version)
endef
OTAD_POST_BUILD_HOOKS += OTAD_BUILD_COMPLETIONS

# The files and modes of the otad .deb (packaging/otad.yaml;
# integrations/integrations_test.go holds the two lists together), but for
# the man page and the boot scripts under /usr/share/doc, which
# target-finalize removes: the board's post-image script puts the boot
# script in the boot partition.
define OTAD_INSTALL_TARGET_CMDS
	$(INSTALL) -D -m 0755 $(@D)/bin/otad $(TARGET_DIR)/usr/bin/otad
	$(INSTALL) -D -m 0644 $(@D)/packaging/otad.toml \
		$(TARGET_DIR)/etc/otad/otad.toml
	$(INSTALL) -d -m 0755 $(TARGET_DIR)/etc/otad/keys.d
	$(INSTALL) -D -m 0755 $(@D)/packaging/health-check \
		$(TARGET_DIR)/usr/libexec/otad/health-check
	$(INSTALL) -D -m 0644 $(@D)/packaging/dbus/io.github.otad.Agent1.conf \
		$(TARGET_DIR)/usr/share/dbus-1/system.d/io.github.otad.Agent1.conf
	$(INSTALL) -D -m 0644 $(@D)/bin/docs/bash/otad \
		$(TARGET_DIR)/usr/share/bash-completion/completions/otad
	$(INSTALL) -D -m 0644 $(@D)/bin/docs/zsh/_otad \
		$(TARGET_DIR)/usr/share/zsh/vendor-completions/_otad
	$(INSTALL) -D -m 0644 $(@D)/bin/docs/fish/otad.fish \
		$(TARGET_DIR)/usr/share/fish/vendor_completions.d/otad.fish
endef

# The group the D-Bus policy lets call otad (a device UI's user joins it),
# as the .deb's postinst creates it.
define OTAD_USERS
	- - otad -1 * - - - otad D-Bus callers
endef

define OTAD_INSTALL_INIT_SYSTEMD
	$(INSTALL) -D -m 0644 $(@D)/packaging/otad.service \
		$(TARGET_DIR)/usr/lib/systemd/system/otad.service
endef

$(eval $(golang-package))
