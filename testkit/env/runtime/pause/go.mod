module local.invalid/eo-pause

go 1.21
