################################################################################
#
# otad
#
################################################################################

OTAD_VERSION = f262cfa29f515b3faa00531354b4efa1e6b6a3ad
OTAD_SITE = $(call github,otad,otad,$(OTAD_VERSION))
# The project has not published a license yet: its copyright file says so.
OTAD_LICENSE = PROPRIETARY
OTAD_LICENSE_FILES = packaging/debian/copyright
OTAD_REDISTRIBUTE = NO
OTAD_GOMOD = github.com/otad/otad
OTAD_BUILD_TARGETS = cmd/otad
OTAD_LDFLAGS = -X main.version=$(OTAD_VERSION)

# The completions come from the command tables, as `make deb` makes them
# (packaging/gendocs, built for and run on the build host).
define OTAD_BUILD_COMPLETIONS
	cd $(@D) && $(HOST_GO_HOST_ENV) $(GO_BIN) run \
		./packaging/gendocs -out $(@D)/bin/docs -version $(OTAD_VERSION)
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
	$(INSTALL) -D -m 0644 $(@D)/bin/docs/bash/otad \
		$(TARGET_DIR)/usr/share/bash-completion/completions/otad
	$(INSTALL) -D -m 0644 $(@D)/bin/docs/zsh/_otad \
		$(TARGET_DIR)/usr/share/zsh/vendor-completions/_otad
	$(INSTALL) -D -m 0644 $(@D)/bin/docs/fish/otad.fish \
		$(TARGET_DIR)/usr/share/fish/vendor_completions.d/otad.fish
endef

# The D-Bus policy (packaging/dbus/, once the pinned commit has it and the
# .deb ships it; the test fails until this package installs it as well):
#	$(INSTALL) -D -m 0644 $(@D)/packaging/dbus/io.github.otad.Agent1.conf \
#		$(TARGET_DIR)/usr/share/dbus-1/system.d/io.github.otad.Agent1.conf
# and the group it lets call otad, which the .deb's postinst creates:
#	OTAD_USERS = - - otad -1 * - - - otad's D-Bus callers

define OTAD_INSTALL_INIT_SYSTEMD
	$(INSTALL) -D -m 0644 $(@D)/packaging/otad.service \
		$(TARGET_DIR)/usr/lib/systemd/system/otad.service
endef

$(eval $(golang-package))
