module local.invalid/eo-logind

go 1.21

require github.com/godbus/dbus/v5 v5.1.0
