include $(sort $(wildcard $(BR2_EXTERNAL_OTAD_PATH)/package/*/*.mk))
